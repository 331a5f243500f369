"""envbuilder: resolve, lock, build, export and certify GPU LLM-training environments.

Pipeline (one subpackage per stage, each usable alone):
    matrix  -> resolve -> render -> lock      (envbuilder lock)
    host, parallel                             (envbuilder doctor, check-parallel)
    build                                      (envbuilder build)
    export                                     (envbuilder export, inspect)
    certify                                    (envbuilder certify, verify-cert)
"""

__version__ = "0.1.0"
