// The Prometheus Operator's CRDs (PodMonitor, PrometheusRule), read from the module's
// example/prometheus-operator-crd/ so that the apiserver validates the chart's monitoring objects
// (tests/e2e/test_install.py). Nothing is built from it.
module podium/testbed/monitoringcrds

go 1.26.7

require github.com/prometheus-operator/prometheus-operator v0.85.0
