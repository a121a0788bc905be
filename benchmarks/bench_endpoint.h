// The endpoint options every benchmark opens its endpoints with: the
// provider and bind address given, the operation timeout, and either
// polling from the waiting threads as fi_pingpong does (busy_poll) or the
// default adaptive progress thread.
//
//   rdma::Endpoint a(bench_endpoint_options("shm", "127.0.0.1", std::chrono::seconds(30), true));
#pragma once

#include <chrono>
#include <string>

#include "rdma/endpoint_options.h"

namespace parafab::benchmarks {

inline rdma::EndpointOptions bench_endpoint_options(const std::string& provider, const std::string& node,
                                                    std::chrono::milliseconds timeout, bool busy_poll) {
  rdma::EndpointOptions eo;
  eo.provider = provider;
  eo.node = node;
  eo.timeout = timeout;
  eo.busy_poll = busy_poll;
  // Busy polling: the threads that wait drive progress themselves.
  eo.progress_thread = !busy_poll;
  return eo;
}

}  // namespace parafab::benchmarks
