// threads.cpp - see threads.hpp.
#include "threads.hpp"

namespace smollm2 {

ThreadPool::ThreadPool(int threads) {
  if (threads <= 0) threads = int(std::max(1u, std::thread::hardware_concurrency()));
  for (int t = 1; t < threads; ++t)
    workers_.emplace_back([this] {
      unsigned seen = 0;
      for (;;) {
        {
          std::unique_lock<std::mutex> lock(mu_);
          start_.wait(lock, [&] { return stop_ || generation_ != seen; });
          if (stop_) return;
          seen = generation_;
          ++active_;
        }
        run_tasks();
        std::lock_guard<std::mutex> lock(mu_);
        if (--active_ == 0) done_.notify_all();
      }
    });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  start_.notify_all();
  for (std::thread& t : workers_) t.join();
}

void ThreadPool::run_tasks() {
  for (;;) {
    int i;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (next_ >= n_) return;
      i = next_++;
    }
    (*fn_)(i);
  }
}

void ThreadPool::parallel_for(int n, const std::function<void(int)>& fn) {
  if (n <= 0) return;
  if (workers_.empty() || n == 1) {
    for (int i = 0; i < n; ++i) fn(i);
    return;
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    fn_ = &fn;
    n_ = n;
    next_ = 0;
    ++active_;  // the caller
    ++generation_;
  }
  start_.notify_all();
  run_tasks();
  std::unique_lock<std::mutex> lock(mu_);
  --active_;
  done_.wait(lock, [&] { return active_ == 0 && next_ >= n_; });
  fn_ = nullptr;
}

}  // namespace smollm2
