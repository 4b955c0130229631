// Client connection probes: find a request's socket and tell whether the client has gone.
#pragma once

#include <string>

namespace loom::server {

// The descriptor of the accepted socket whose peer is remote_addr:remote_port and whose local
// port is `local_port` (cpp-httplib 0.11 does not expose it), or -1. Scans /proc/self/fd once.
int FindClientSocket(const std::string& remote_addr, int remote_port, int local_port);

// True when the peer has closed or reset the connection (poll: POLLRDHUP / POLLHUP / POLLERR),
// without reading or waiting. False for -1.
bool PeerClosed(int fd);

// shutdown(SHUT_RDWR) on every accepted socket of this process whose local port is
// `local_port` (idle keep-alive connections at shutdown); returns how many.
int ShutdownClientSockets(int local_port);

}  // namespace loom::server
