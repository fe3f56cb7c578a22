// The Kineto reader's input, in chunks of kChunk bytes (a file through zlib, or a string), read
// ahead on a second thread while the parser works, so memory does not grow with the file.
#pragma once
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

#include "core/trace/kineto_raw.h"

namespace mgpu::trace::kineto {

inline constexpr size_t kChunk = size_t{1} << 20;

// Reads the next chunk on a second thread while the parser works through the current one, so
// reading (and inflating a .gz) costs the parser no time. Two buffers: the parser's and this one.
class Prefetcher {
 public:
  explicit Prefetcher(const ReadChunk& read) : read_(read), next_(kChunk + 1) {
    thread_ = std::thread([this] { run(); });
  }
  // Stops the read-ahead (a read in progress finishes first) and joins it. (std::thread and a flag
  // rather than std::jthread: libc++ 14, the web build's, has no jthread.)
  ~Prefetcher() {
    {
      std::lock_guard lock(mutex_);
      stop_ = true;
    }
    changed_.notify_all();
    thread_.join();
  }
  Prefetcher(const Prefetcher&) = delete;
  Prefetcher& operator=(const Prefetcher&) = delete;

  // Swaps the parser's spent `buffer` for the next chunk; returns its size (0 at the end). A
  // read's error is thrown here, on the parser's thread.
  size_t next(std::vector<char>& buffer) {
    std::unique_lock lock(mutex_);
    changed_.wait(lock, [&] { return full_; });
    if (error_) std::rethrow_exception(error_);
    buffer.swap(next_);
    full_ = false;
    changed_.notify_all();
    return size_;
  }

 private:
  void run() {
    for (;;) {
      std::unique_lock lock(mutex_);
      changed_.wait(lock, [&] { return !full_ || stop_; });
      if (full_) return;  // the parser stopped
      lock.unlock();      // next_ is this thread's alone until full_ is set
      size_t n = 0;
      std::exception_ptr error;
      try {
        n = read_(next_.data(), kChunk);
      } catch (...) {
        error = std::current_exception();
      }
      lock.lock();
      size_ = n, error_ = error, full_ = true;
      changed_.notify_all();
      if (n == 0 || error) return;
    }
  }

  const ReadChunk& read_;
  std::vector<char> next_;
  std::mutex mutex_;
  std::condition_variable_any changed_;
  bool full_ = false;
  bool stop_ = false;  // the parser is done: no more chunks wanted
  size_t size_ = 0;
  std::exception_ptr error_;
  std::thread thread_;  // last: started after the members it uses
};

// RapidJSON's input-stream interface over chunks from `read`. A '\0' after the chunk's last byte
// lets Peek() read without a bounds check; '\0' also tells RapidJSON the input has ended.
class ChunkStream {
 public:
  using Ch = char;
  ChunkStream(const ReadChunk& read, bool prefetch) : read_(read), buffer_(kChunk + 1) {
    if (prefetch) prefetch_.emplace(read);
    refill();
  }

  Ch Peek() const { return *current_; }
  Ch Take() {
    const Ch c = *current_;
    if (current_ < last_ && ++current_ == last_) refill();
    return c;
  }
  size_t Tell() const { return static_cast<size_t>(before_ + (current_ - buffer_.data())); }
  bool at_end() const { return current_ == last_; }

  // Write side of RapidJSON's stream concept: a reader never writes.
  Ch* PutBegin() { return nullptr; }
  void Put(Ch) {}
  void Flush() {}
  size_t PutEnd(Ch*) { return 0; }

 private:
  void refill() {
    before_ += last_ == nullptr ? 0 : last_ - buffer_.data();
    const size_t n = prefetch_ ? prefetch_->next(buffer_) : read_(buffer_.data(), kChunk);
    buffer_[n] = '\0';
    current_ = buffer_.data();
    last_ = buffer_.data() + n;
  }

  const ReadChunk& read_;
  std::vector<char> buffer_;
  std::optional<Prefetcher> prefetch_;
  const char* current_ = nullptr;
  const char* last_ = nullptr;
  int64_t before_ = 0;  // bytes of the chunks before this one
};

}  // namespace mgpu::trace::kineto
