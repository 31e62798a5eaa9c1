// threads.hpp - a tiny fork-join pool: parallel_for(n, fn) runs fn(i) for i in [0, n) on the
// pool's threads (the caller is one of them) and returns when all are done.
#pragma once

#include <condition_variable>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace smollm2 {

class ThreadPool {
 public:
  explicit ThreadPool(int threads);  // threads <= 0: std::thread::hardware_concurrency()
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int size() const { return int(workers_.size()) + 1; }
  // Tasks are handed out dynamically; fn must be safe to call concurrently for different i.
  void parallel_for(int n, const std::function<void(int)>& fn);

 private:
  void run_tasks();
  std::vector<std::thread> workers_;
  std::mutex mu_;
  std::condition_variable start_, done_;
  const std::function<void(int)>* fn_ = nullptr;
  int n_ = 0, next_ = 0, active_ = 0;
  unsigned generation_ = 0;
  bool stop_ = false;
};

}  // namespace smollm2
