"""Export a built image to HPC artifacts: an enroot squashfs (.sqsh) or an Apptainer SIF (.sif).

    image_source  read the image from the Docker engine (docker save: config + layer tars)
    flatten       merge the layers, whiteouts applied, into one deterministic tar stream
    conventions   what enroot (/etc/rc, /etc/environment, ...) and Apptainer (/.singularity.d) expect
    squashfs      the real mksquashfs, fed that tar on stdin; superblock parsing
    sif           the SIF container format (Sylabs spec): writer, reader and structural checks
    render        Apptainer definition file and launch snippets from templates/
    pipeline      `envbuilder export`: the steps above, atomic output, errors 40-45
    inspect       `envbuilder inspect`: read an artifact back and verify it
"""
