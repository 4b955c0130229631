// Client connection probes over /proc/self/fd, getpeername/getsockname and poll.
#include "server/connection.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>

#include <cstdlib>
#include <vector>

namespace loom::server {

namespace {

// Both ends of a connected TCP socket as ("addr", port); false for anything else.
bool Ends(int fd, std::string* peer_addr, int* peer_port, int* local_port) {
  sockaddr_storage peer{}, local{};
  socklen_t peer_len = sizeof(peer), local_len = sizeof(local);
  if (getpeername(fd, reinterpret_cast<sockaddr*>(&peer), &peer_len) != 0) return false;
  if (getsockname(fd, reinterpret_cast<sockaddr*>(&local), &local_len) != 0) return false;
  char buf[INET6_ADDRSTRLEN] = {0};
  if (peer.ss_family == AF_INET) {
    const auto* p = reinterpret_cast<const sockaddr_in*>(&peer);
    inet_ntop(AF_INET, &p->sin_addr, buf, sizeof(buf));
    *peer_port = ntohs(p->sin_port);
    *local_port = ntohs(reinterpret_cast<const sockaddr_in*>(&local)->sin_port);
  } else if (peer.ss_family == AF_INET6) {
    const auto* p = reinterpret_cast<const sockaddr_in6*>(&peer);
    inet_ntop(AF_INET6, &p->sin6_addr, buf, sizeof(buf));
    *peer_port = ntohs(p->sin6_port);
    *local_port = ntohs(reinterpret_cast<const sockaddr_in6*>(&local)->sin6_port);
  } else {
    return false;
  }
  *peer_addr = buf;
  return true;
}

std::vector<int> SocketFds() {
  std::vector<int> out;
  DIR* dir = opendir("/proc/self/fd");
  if (dir == nullptr) return out;
  while (dirent* e = readdir(dir)) {
    if (e->d_name[0] < '0' || e->d_name[0] > '9') continue;
    const int fd = std::atoi(e->d_name);
    struct stat st {};
    if (fstat(fd, &st) == 0 && S_ISSOCK(st.st_mode)) out.push_back(fd);
  }
  closedir(dir);
  return out;
}

}  // namespace

int FindClientSocket(const std::string& remote_addr, int remote_port, int local_port) {
  for (int fd : SocketFds()) {
    std::string addr;
    int peer_port = 0, port = 0;
    if (Ends(fd, &addr, &peer_port, &port) && peer_port == remote_port && port == local_port &&
        addr == remote_addr) {
      return fd;
    }
  }
  return -1;
}

bool PeerClosed(int fd) {
  if (fd < 0) return false;
  pollfd p{fd, POLLRDHUP, 0};
  if (poll(&p, 1, 0) <= 0) return false;
  return (p.revents & (POLLRDHUP | POLLHUP | POLLERR | POLLNVAL)) != 0;
}

int ShutdownClientSockets(int local_port) {
  int n = 0;
  for (int fd : SocketFds()) {
    std::string addr;
    int peer_port = 0, port = 0;
    if (Ends(fd, &addr, &peer_port, &port) && port == local_port) {
      shutdown(fd, SHUT_RDWR);
      ++n;
    }
  }
  return n;
}

}  // namespace loom::server
