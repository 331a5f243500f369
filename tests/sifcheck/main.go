// sifcheck reads a SIF file through the Sylabs reference library (github.com/sylabs/sif/v2,
// Debian: golang-github-sylabs-sif-dev) and prints what it sees as JSON, so the Python tests
// can compare envbuilder's SIF writer and reader against the reference implementation.
//
// Build offline (GOPATH mode, see build.sh): no module download is needed.
package main

import (
	"encoding/json"
	"fmt"
	"os"

	"github.com/sylabs/sif/v2/pkg/sif"
)

type object struct {
	ID       uint32 `json:"id"`
	DataType string `json:"datatype"`
	Name     string `json:"name"`
	GroupID  uint32 `json:"group_id"`
	Offset   int64  `json:"offset"`
	Size     int64  `json:"size"`
	Created  int64  `json:"ctime"`
	FSType   string `json:"fstype,omitempty"`
	PartType string `json:"parttype,omitempty"`
	Arch     string `json:"arch,omitempty"`
}

type report struct {
	Launch           string   `json:"launch"`
	Version          string   `json:"version"`
	Arch             string   `json:"arch"`
	ID               string   `json:"id"`
	Created          int64    `json:"ctime"`
	Modified         int64    `json:"mtime"`
	DescriptorsFree  int64    `json:"descriptors_free"`
	DescriptorsTotal int64    `json:"descriptors_total"`
	DescriptorsOff   int64    `json:"descriptors_offset"`
	DataOffset       int64    `json:"data_offset"`
	DataSize         int64    `json:"data_size"`
	Objects          []object `json:"objects"`
	Primary          *object  `json:"primary_partition"`
	Labels           string   `json:"labels"`
	Deffile          string   `json:"deffile"`
}

func describe(d sif.Descriptor) object {
	o := object{
		ID: d.ID(), DataType: d.DataType().String(), Name: d.Name(), GroupID: d.GroupID(),
		Offset: d.Offset(), Size: d.Size(), Created: d.CreatedAt().Unix(),
	}
	if d.DataType() == sif.DataPartition {
		fs, pt, arch, err := d.PartitionMetadata()
		if err == nil {
			o.FSType, o.PartType, o.Arch = fs.String(), pt.String(), arch
		}
	}
	return o
}

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: sifcheck FILE.sif")
		os.Exit(2)
	}
	f, err := sif.LoadContainerFromPath(os.Args[1], sif.OptLoadWithFlag(os.O_RDONLY))
	if err != nil {
		fmt.Fprintln(os.Stderr, "load:", err)
		os.Exit(1)
	}
	defer f.UnloadContainer()

	r := report{
		Launch: f.LaunchScript(), Version: f.Version(), Arch: f.PrimaryArch(), ID: f.ID(),
		Created: f.CreatedAt().Unix(), Modified: f.ModifiedAt().Unix(),
		DescriptorsFree: f.DescriptorsFree(), DescriptorsTotal: f.DescriptorsTotal(),
		DescriptorsOff: f.DescriptorsOffset(), DataOffset: f.DataOffset(), DataSize: f.DataSize(),
		Objects: []object{},
	}
	f.WithDescriptors(func(d sif.Descriptor) bool {
		r.Objects = append(r.Objects, describe(d))
		return false
	})
	if d, err := f.GetDescriptor(sif.WithPartitionType(sif.PartPrimSys)); err == nil {
		o := describe(d)
		r.Primary = &o
	}
	if d, err := f.GetDescriptor(sif.WithDataType(sif.DataLabels)); err == nil {
		b, err := d.GetData()
		if err != nil {
			fmt.Fprintln(os.Stderr, "labels:", err)
			os.Exit(1)
		}
		r.Labels = string(b)
	}
	if d, err := f.GetDescriptor(sif.WithDataType(sif.DataDeffile)); err == nil {
		b, err := d.GetData()
		if err != nil {
			fmt.Fprintln(os.Stderr, "deffile:", err)
			os.Exit(1)
		}
		r.Deffile = string(b)
	}
	out, _ := json.MarshalIndent(r, "", "  ")
	fmt.Println(string(out))
}
