"""The Go builds behind `testbed.build`: the toolchain (`go`), the control plane, helm and the
oracles (`components`), the operators (`operators`)."""
