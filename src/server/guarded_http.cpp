#include "server/guarded_http.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "server/client_socket.h"
#include "server/request_framing.h"

namespace hearth::server {
namespace {

using Clock = std::chrono::steady_clock;
thread_local bool t_over_capacity = false;

int ms_until(Clock::time_point t) {
  const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(t - Clock::now()).count();
  return static_cast<int>(std::clamp<int64_t>(ms, 0, 1 << 30));
}

Clock::duration seconds(double s) {
  return std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(s));
}

const char* reason_phrase(int status) {
  switch (status) {
    case 400:
      return "Bad Request";
    case 408:
      return "Request Timeout";
    case 411:
      return "Length Required";
    case 413:
      return "Payload Too Large";
    case 431:
      return "Request Header Fields Too Large";
    case 501:
      return "Not Implemented";
    case 503:
      return "Service Unavailable";
    default:
      return "Error";
  }
}

std::string peer_of(int sock) {
  std::string ip = "?";
  int port = 0;
  socket_address(sock, true, ip, port);
  return ip + ":" + std::to_string(port);
}

// Sends a whole small response without blocking for long (it fits the socket buffer).
void send_now(int sock, const std::string& bytes) {
  size_t off = 0;
  const auto until = Clock::now() + std::chrono::milliseconds(200);
  while (off < bytes.size()) {
    const ssize_t n =
        send(sock, bytes.data() + off, bytes.size() - off, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n > 0) {
      off += static_cast<size_t>(n);
      continue;
    }
    if (n < 0 && (errno == EAGAIN || errno == EINTR) && Clock::now() < until) {
      pollfd p{sock, POLLOUT, 0};
      poll(&p, 1, 20);
      continue;
    }
    return;
  }
}

std::string error_response(int status, const std::string& body, bool retry) {
  std::string r =
      "HTTP/1.1 " + std::to_string(status) + " " + reason_phrase(status) +
      "\r\nContent-Type: application/json\r\nContent-Length: " + std::to_string(body.size()) +
      "\r\nConnection: close\r\n";
  if (retry) r += "Retry-After: 1\r\n";
  return r + "\r\n" + body;
}

// Closes after reading what the client already sent (closing with unread bytes makes
// the kernel send a reset, which can destroy the error response before it is read).
// `wait`: how long to wait for the client's end of stream (0 on the listener thread,
// which must not be held up by a client that never closes).
void drain_and_close(int sock, std::chrono::milliseconds wait) {
  shutdown(sock, SHUT_WR);
  char buf[4096];
  const auto until = Clock::now() + wait;
  size_t drained = 0;
  for (;;) {
    const ssize_t n = recv(sock, buf, sizeof buf, MSG_DONTWAIT);
    if (n == 0) break;
    if (n > 0) {
      drained += static_cast<size_t>(n);
      if (drained > (1u << 20) || Clock::now() >= until + std::chrono::milliseconds(50)) break;
    } else {
      if (errno != EAGAIN && errno != EINTR) break;
      if (Clock::now() >= until) break;
      pollfd p{sock, POLLIN, 0};
      if (poll(&p, 1, ms_until(until)) <= 0) break;
    }
  }
  close(sock);
}

// One connection's byte stream as httplib sees it: buffered reads that stop at the
// request's deadline and at the first byte breaking the framing limits (then the
// error response is sent here and every later read and write fails).
class GuardedStream final : public httplib::Stream {
 public:
  GuardedStream(int sock, const HttpLimits& limits, const ErrorBodyFn& error_body,
                const GuardLogFn& log)
      : sock_(sock),
        lim_(limits),
        error_body_(error_body),
        log_(log),
        framer_(limits.max_header_bytes, limits.max_body_bytes) {}

  // Waits (up to the idle timeout) for the first byte of the next request and starts
  // its deadline. False when none comes or the server stops.
  bool next_request(const std::atomic<socket_t>& listener) {
    framer_.reset();
    if (pos_ == len_) {
      const auto until = Clock::now() + seconds(lim_.idle_timeout_s);
      for (;;) {
        if (listener == INVALID_SOCKET) return false;
        const int wait = std::min(ms_until(until), 100);
        pollfd p{sock_, POLLIN, 0};
        const int r = poll(&p, 1, wait);
        if (r > 0) break;
        if (r < 0 && errno != EINTR) return false;
        if (r == 0 && Clock::now() >= until) return false;
      }
    }
    deadline_ = Clock::now() + seconds(lim_.request_timeout_s);
    return true;
  }
  bool failed() const { return failed_; }
  bool request_complete() const { return framer_.complete(); }

  bool is_readable() const override {
    if (failed_) return false;
    if (pos_ < len_) return true;
    pollfd p{sock_, POLLIN, 0};
    return poll(&p, 1, static_cast<int>(lim_.io_timeout_s * 1000)) > 0;
  }
  // Asked before every chunk of a stream (64 streams: 64 a step): one poll for both
  // questions when the socket can take bytes now (the common case), the wait for room
  // only when it cannot.
  bool is_writable() const override {
    if (failed_) return false;
    pollfd p{sock_, POLLOUT | POLLIN, 0};
    const int now = poll(&p, 1, 0);
    if (now <= 0 || (p.revents & POLLOUT) == 0) {
      pollfd w{sock_, POLLOUT, 0};
      if (poll(&w, 1, static_cast<int>(lim_.io_timeout_s * 1000)) <= 0) return false;
      p = pollfd{sock_, POLLIN, 0};
      if (poll(&p, 1, 0) <= 0) return true;
    } else if ((p.revents & ~POLLOUT) == 0) {
      return true;
    }
    // Readable (or an error / hang-up to read): data (alive) or end of stream (gone).
    char c;
    return recv(sock_, &c, 1, MSG_PEEK | MSG_DONTWAIT) != 0;
  }

  ssize_t read(char* ptr, size_t size) override {
    if (failed_) return -1;
    if (framer_.complete()) {  // httplib reads past the request: framing disagreement
      refuse(400, "bytes past the end of the request");
      return -1;
    }
    if (pos_ == len_) {
      const ssize_t got = fill();
      if (got <= 0) return got;
    }
    const size_t n = std::min(size, len_ - pos_);
    if (!framer_.feed(buf_ + pos_, n)) {
      refuse(framer_.error().status, framer_.error().message);
      return -1;
    }
    std::memcpy(ptr, buf_ + pos_, n);
    pos_ += n;
    return static_cast<ssize_t>(n);
  }

  // Writes all `size` bytes, as a send on the blocking socket did (some of httplib's callers
  // do not write the rest of a short write): sends what the socket takes now (a streamed
  // chunk: all of it, one system call) and waits up to the I/O timeout for room only when
  // it takes nothing.
  ssize_t write(const char* ptr, size_t size) override {
    if (failed_) return -1;
    size_t done = 0;
    while (done < size) {
      const ssize_t n = send(sock_, ptr + done, size - done, MSG_NOSIGNAL | MSG_DONTWAIT);
      if (n > 0) {
        done += static_cast<size_t>(n);
        continue;
      }
      if (n < 0 && errno == EINTR) continue;
      if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK) return -1;
      pollfd p{sock_, POLLOUT, 0};
      const int r = poll(&p, 1, static_cast<int>(lim_.io_timeout_s * 1000));
      if (r < 0 && errno == EINTR) continue;
      if (r <= 0) return -1;
    }
    return static_cast<ssize_t>(size);
  }

  void get_remote_ip_and_port(std::string& ip, int& port) const override {
    socket_address(sock_, true, ip, port);
  }
  void get_local_ip_and_port(std::string& ip, int& port) const override {
    socket_address(sock_, false, ip, port);
  }
  socket_t socket() const override { return sock_; }

 private:
  // Reads more from the socket: > 0 bytes, 0 at the end of the stream, -1 on error or
  // when the request's deadline passed (then 408 was sent).
  ssize_t fill() {
    for (;;) {
      if (Clock::now() >= deadline_) {
        char secs[32];
        std::snprintf(secs, sizeof secs, "%g", lim_.request_timeout_s);
        refuse(408, std::string("the request was not received in full within ") + secs +
                        " s (--request-timeout); " + std::to_string(framer_.offset()) +
                        " bytes arrived");
        return -1;
      }
      const int wait = std::min(ms_until(deadline_), static_cast<int>(lim_.io_timeout_s * 1000));
      pollfd p{sock_, POLLIN, 0};
      const int r = poll(&p, 1, std::max(wait, 1));
      if (r < 0 && errno != EINTR) return -1;
      if (r <= 0) continue;  // the deadline check above ends the wait
      const ssize_t n = recv(sock_, buf_, sizeof buf_, 0);
      if (n < 0 && (errno == EINTR || errno == EAGAIN)) continue;
      if (n <= 0) return n < 0 ? -1 : 0;
      pos_ = 0;
      len_ = static_cast<size_t>(n);
      return n;
    }
  }

  void refuse(int status, const std::string& message) {
    failed_ = true;
    send_now(sock_, error_response(status, error_body_(framer_.path(), status, message), false));
    if (log_) log_(status, message, peer_of(sock_));
  }

  int sock_;
  const HttpLimits& lim_;
  const ErrorBodyFn& error_body_;
  const GuardLogFn& log_;
  RequestFramer framer_;
  Clock::time_point deadline_ = Clock::time_point::max();
  bool failed_ = false;
  char buf_[8192];
  size_t pos_ = 0, len_ = 0;
};

}  // namespace

ConnectionPool::ConnectionPool(int max_connections) : max_(std::max(1, max_connections)) {}

ConnectionPool::~ConnectionPool() { shutdown(); }

bool ConnectionPool::over_capacity() { return t_over_capacity; }

void ConnectionPool::enqueue(std::function<void()> fn) {
  std::unique_lock<std::mutex> lock(mu_);
  if (stopping_ || busy_ + static_cast<int>(jobs_.size()) >= max_) {
    lock.unlock();
    t_over_capacity = true;  // the job answers 503 and closes, here on the listener thread
    fn();
    t_over_capacity = false;
    return;
  }
  jobs_.push_back(std::move(fn));
  if (static_cast<int>(jobs_.size()) > idle_ && static_cast<int>(threads_.size()) < max_) {
    ++idle_;  // the new thread counts as idle until it takes a job
    threads_.emplace_back([this] { worker(); });
  }
  cv_.notify_one();
}

void ConnectionPool::worker() {
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    cv_.wait(lock, [this] { return stopping_ || !jobs_.empty(); });
    if (jobs_.empty()) {
      --idle_;
      return;
    }
    std::function<void()> job = std::move(jobs_.front());
    jobs_.pop_front();
    --idle_;
    ++busy_;
    lock.unlock();
    job();
    lock.lock();
    --busy_;
    ++idle_;
  }
}

void ConnectionPool::shutdown() {
  std::vector<std::thread> threads;
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
    threads.swap(threads_);
  }
  cv_.notify_all();
  for (auto& t : threads) t.join();
}

GuardedServer::GuardedServer(HttpLimits limits, ErrorBodyFn error_body, GuardLogFn log)
    : limits_(limits), error_body_(std::move(error_body)), log_(std::move(log)) {
  const int cap = limits_.max_connections;
  new_task_queue = [cap] { return new ConnectionPool(cap); };
}

void GuardedServer::set_backlog(int n) {
  const socket_t sock = svr_sock_;
  if (sock != INVALID_SOCKET) ::listen(sock, n);  // a second listen() only resizes the queue
}

bool GuardedServer::process_and_close_socket(socket_t sock) {
  if (ConnectionPool::over_capacity()) {
    const std::string msg = "too many open connections (--max-connections " +
                            std::to_string(limits_.max_connections) + "); retry later";
    send_now(sock, error_response(503, error_body_("", 503, msg), true));
    if (log_) log_(503, msg, peer_of(sock));
    drain_and_close(sock, std::chrono::milliseconds(0));
    return false;
  }
  const int one = 1;
  setsockopt(sock, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  GuardedStream strm(sock, limits_, error_body_, log_);
  bool ok = false;
  size_t left = keep_alive_max_count_;
  while (svr_sock_ != INVALID_SOCKET && left > 0 && strm.next_request(svr_sock_)) {
    bool connection_closed = false;
    ok = process_request(strm, left == 1, connection_closed, nullptr);
    // A request answered before its body was read (an error) leaves that body
    // unread: the connection cannot carry another request.
    if (!ok || connection_closed || strm.failed() || !strm.request_complete()) break;
    --left;
  }
  if (strm.failed()) {
    drain_and_close(sock, std::chrono::milliseconds(200));
  } else {
    ::shutdown(sock, SHUT_RDWR);
    close(sock);
  }
  return ok;
}

}  // namespace hearth::server
