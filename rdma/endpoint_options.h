// Everything an Endpoint is configured with. apps/ fills it from flags; the
// library reads no environment (STYLE.md).
#pragma once

#include <chrono>
#include <cstddef>
#include <string>

namespace parafab::rdma {

struct EndpointOptions {
  // libfabric provider, FI_PROVIDER syntax: "tcp;ofi_rxm", "shm",
  // "verbs;ofi_rxm", "efa".
  std::string provider = "tcp;ofi_rxm";
  // Address to bind. Empty: the provider's choice (shm ignores it). On this
  // project's machines tests always give 127.0.0.1.
  std::string node = "127.0.0.1";
  // Largest single libfabric message or RMA transfer: 0 takes the provider's
  // max_msg_size; a smaller value forces chunking (tests use it to exercise
  // reassembly with providers whose limit is 2^64).
  size_t max_message_bytes = 0;
  // Messages of up to this many bytes (header included) travel in one send
  // into a posted receive buffer; larger ones go as a header plus tagged
  // chunks received straight into their final buffer. 0: the provider's
  // default, the largest frame its own eager path carries:
  // - ofi_rxm: 16 KiB, its eager buffer (FI_OFI_RXM_BUFFER_SIZE); a frame
  //   past it goes by ofi_rxm's rendezvous: a 16 KiB payload took 65-73 us
  //   one way eager against 26-30 us as header and chunk;
  // - shm: 4 KiB, its inject size; a larger frame goes by a CMA copy and an
  //   answer through the sender's queue either way, so a 4 KiB payload
  //   (4136-byte frame) took 3.8 us eager against 2.2 us as header and
  //   chunk (both injected); 8 and 16 KiB measured the same both ways;
  // - others: 17 KiB, so a 16 KiB payload with its headers is eager.
  // From 32 KiB on the chunked path was faster on both providers (shm 32
  // KiB ping-pong 8.1-9.0 -> 7.4 us one way, streaming 2.0 -> 4.7 GB/s;
  // tcp 52 -> 43 us).
  size_t eager_bytes = 0;
  // Messages larger than the eager size (and of 32 KiB or more) in flight
  // to one peer at a time; a send beyond waits (driving progress) until one
  // completes, or fails after `timeout`. 0: the provider's default, 2 over
  // shm and no limit elsewhere. shm streaming 8 large messages at a time,
  // limit 0 -> 2: 64 KiB 4.3 -> 7.3 GB/s, 256 KiB 6-8.6 -> 11, 1 MiB 5-5.8
  // -> 11.6, 4 MiB 3.5-4.9 -> 6.3-6.6 (3 or 4 were slower than 2; one at a
  // time 12.2 at 1 MiB); over tcp;ofi_rxm a window of 8 is as fast as one
  // of 1 or 2.
  size_t large_in_flight_per_peer = 0;
  // Receive buffers posted for unsolicited messages.
  size_t receive_buffers = 64;
  // Largest inbound message accepted; a header announcing more is dropped
  // and counted (a hostile or corrupt peer cannot make us allocate 2^60 bytes).
  size_t max_inbound_bytes = size_t{4} << 30;
  // libfabric operations posted and not yet completed; more wait (back-pressure).
  size_t max_in_flight = 256;
  // Every operation completes within this time, with an error if need be.
  std::chrono::milliseconds timeout{30000};
  // After its last completion the progress thread keeps polling this long
  // before it sleeps in the completion queue's wait object: traffic in
  // bursts sees polling latency, an idle endpoint no CPU.
  std::chrono::microseconds idle_spin{200};
  // Never sleep: the progress thread polls, and receive() and wait() poll
  // the queue themselves instead of waiting to be woken. For dedicated cores
  // and latency benchmarks.
  bool busy_poll = false;
  // Run a progress thread. Off: the caller drives progress (receive, wait,
  // progress), as fi_pingpong does; fewer threads to schedule on few cores.
  bool progress_thread = true;
  // Ask the provider for FI_HMEM (GPU memory registration). Off by default:
  // providers without it would otherwise not be found.
  bool hmem = false;
  // Register every local buffer handed to the provider (the receive pool,
  // each send's frame and pieces, an inbound message's buffer or landing, an
  // RMA's local buffer without a local_region) and pass its descriptor, as
  // providers with FI_MR_LOCAL in their mr_mode require (efa, and ofi_rxm
  // over verbs), also where the provider does not: tests run that path on
  // tcp;ofi_rxm and shm, which never ask for it. A registration per
  // operation; off, only where the provider asks.
  bool register_local_buffers = false;
};

}  // namespace parafab::rdma
