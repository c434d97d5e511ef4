// The pieces of the moestat._core module, one file each.
#pragma once

#include <nanobind/nanobind.h>

namespace moestat::python {

void bind_model(nanobind::module_& module);      // topology, placement, snapshot
void bind_recorders(nanobind::module_& module);  // CpuRecorder, CudaRecorder
void bind_planning(nanobind::module_& module);   // planners, metrics, hot-expert masks
void bind_files(nanobind::module_& module);      // reading and writing statistics files
void bind_online(nanobind::module_& module);     // live metrics, Prometheus text, HTTP endpoint
void bind_routes(nanobind::module_& module);     // per-request routes, their file and recorders

}  // namespace moestat::python
