"""The nightly certification job: plan the rows, run each row's pipeline, render the dashboard.

Every step is an `envbuilder` command run as a child process, with exactly the arguments a person
would type on a laptop; CI runs the same steps through `make nightly-step` (one per workflow step)
and a laptop runs them all through `make nightly`.

    plan      -> rows from the matrix (what `matrix list` lists) + the runner labels for their level
    steps     -> one row's commands: lock --check, build, sbom, export sqsh/sif, certify, verify-cert
    pipeline  -> rows in parallel up to --parallel, resumable, then `report` with the regression gate
"""
