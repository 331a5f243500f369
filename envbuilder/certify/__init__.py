"""Certification: checks that run *inside* the environment being certified.

`python -m envbuilder.certify` is the in-environment entry point. Everything it imports
is the standard library plus torch (and optional packages it probes), because it runs
inside images and venvs that have no click, rich or tomlkit. The host side
(`envbuilder certify`, `verify-cert`) lives in envbuilder/certify/{flow,expectations,runner,
verify,sign}.py (flow: the whole run; runner: one object per target kind), which the in-env
side never imports; envbuilder/cli/certify_cmd.py only parses, calls and prints.

Layout (pipeline order):
    expect     -> what the lock promises (a small JSON the host writes)
    level0     -> drift, imports, torch build facts         (no GPU)
    level1     -> driver, arch, kernels, GEMM, tiny pretrain (1 GPU)
    level2     -> NCCL bandwidth, parallel variants          (>=2 GPUs)
    certificate-> the certificate record (Certificate, CheckResult): written here, read by report/nightly
    report     -> certificate JSON + Markdown report + SVG loss curves
"""

CERT_NAME = "certificate.json"
REPORT_NAME = "report.md"
