// opmarket/kernel_threads.h: the intra-op thread pool and opmarket::shard of
// opmarket/kernel.h, which includes it (not a header to include on its own).
#pragma once

namespace opmarket __attribute__((visibility("hidden"))) {

// --- threads -----------------------------------------------------------------------------

namespace detail {

// The intra-op threads setting lives in Python (opmarket.sdk._threads) as one C int whose
// address the library reads at import; reading it is one load.
inline std::atomic<const int*>& threads_setting() {
  static std::atomic<const int*> setting{nullptr};
  return setting;
}

inline thread_local bool in_pool_worker = false;

// A fixed set of workers; run() hands out blocks [0, n) to them and the calling thread, and
// returns when every block ran. One run at a time; a caller that finds the pool busy, or a
// block that shards again, runs its blocks inline instead of waiting.
class ThreadPool {
 public:
  explicit ThreadPool(int workers) : size_(workers + 1) {
    for (int i = 0; i < workers; ++i) threads_.emplace_back([this] { loop(); });
  }
  ~ThreadPool() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    wake_.notify_all();
    for (auto& t : threads_) t.join();
  }
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int size() const { return size_; }

  void run(int64_t n, const std::function<void(int64_t)>& block) {
    std::unique_lock<std::mutex> busy(run_mu_, std::try_to_lock);
    if (!busy.owns_lock() || in_pool_worker || threads_.empty() || n <= 1) {
      for (int64_t i = 0; i < n; ++i) block(i);
      return;
    }
    Job job(&block, n);
    {
      std::lock_guard<std::mutex> lock(mu_);
      job_ = &job;
      ++generation_;
    }
    wake_.notify_all();
    work(job);
    std::unique_lock<std::mutex> lock(mu_);
    done_.wait(lock, [&] { return job.finished.load() == n && active_ == 0; });
    job_ = nullptr;
    lock.unlock();
    if (job.error) std::rethrow_exception(job.error);
  }

 private:
  struct Job {
    Job(const std::function<void(int64_t)>* f, int64_t count) : fn(f), n(count) {}
    const std::function<void(int64_t)>* fn;
    int64_t n;
    std::atomic<int64_t> next{0};
    std::atomic<int64_t> finished{0};
    std::mutex error_mu;
    std::exception_ptr error;
  };

  static void work(Job& job) {
    for (int64_t i; (i = job.next.fetch_add(1)) < job.n;) {
      try {
        (*job.fn)(i);
      } catch (...) {
        std::lock_guard<std::mutex> lock(job.error_mu);
        if (!job.error) job.error = std::current_exception();
      }
      job.finished.fetch_add(1);
    }
  }

  void loop() {
    in_pool_worker = true;
    uint64_t seen = 0;
    for (;;) {
      Job* job;
      {
        std::unique_lock<std::mutex> lock(mu_);
        wake_.wait(lock, [&] { return stop_ || (job_ != nullptr && generation_ != seen); });
        if (stop_) return;
        seen = generation_;
        job = job_;
        ++active_;
      }
      work(*job);
      {
        std::lock_guard<std::mutex> lock(mu_);
        --active_;
      }
      done_.notify_all();
    }
  }

  const int size_;
  std::vector<std::thread> threads_;
  std::mutex run_mu_;
  std::mutex mu_;
  std::condition_variable wake_;
  std::condition_variable done_;
  Job* job_ = nullptr;
  uint64_t generation_ = 0;
  int active_ = 0;
  bool stop_ = false;
};

struct PoolHolder {
  std::mutex mu;
  std::shared_ptr<ThreadPool> pool;
};

inline PoolHolder& pool_holder() {
  // Never destroyed: workers must not be joined while the interpreter shuts down.
  static PoolHolder* holder = [] {
    auto* h = new PoolHolder();
    // A forked child has none of the parent's threads: forget the pool (and a mutex that
    // may have been held), build a new one on first use.
    pthread_atfork(nullptr, nullptr, [] { new (&pool_holder()) PoolHolder(); });
    return h;
  }();
  return *holder;
}

}  // namespace detail

// The intra-op threads setting: how many threads shard() uses, the caller included.
inline int intra_op_threads() {
  const int* setting = detail::threads_setting().load(std::memory_order_relaxed);
  int n = setting ? __atomic_load_n(setting, __ATOMIC_RELAXED) : 1;
  return n > 0 ? n : 1;
}

// The library's pool, rebuilt when the setting changed since the last call.
inline std::shared_ptr<detail::ThreadPool> thread_pool() {
  int want = intra_op_threads();
  auto& holder = detail::pool_holder();
  std::lock_guard<std::mutex> lock(holder.mu);
  if (!holder.pool || holder.pool->size() != want) {
    holder.pool.reset();  // joins the old workers (a run in progress holds its own reference)
    holder.pool = std::make_shared<detail::ThreadPool>(want - 1);
  }
  return holder.pool;
}

// Below this much work (in cost units, about cycles) a shard is not worth a thread.
constexpr int64_t kMinCostPerShard = 10000;

// TensorFlow's Shard: run fn(start, limit) over disjoint ranges covering [0, total), in
// parallel on the intra-op threads. cost_per_unit estimates the work of one unit (about
// cycles); small totals run inline. fn must be thread-safe and must not touch Python (release
// the GIL around the call); the first exception a range throws is rethrown here.
inline void shard(int64_t total, int64_t cost_per_unit,
                  const std::function<void(int64_t, int64_t)>& fn) {
  if (total <= 0) return;
  const int threads = intra_op_threads();
  const double work = static_cast<double>(total) * static_cast<double>(std::max<int64_t>(
                                                       cost_per_unit, 1));
  if (threads <= 1 || total == 1 || work < 2.0 * kMinCostPerShard) {
    fn(0, total);
    return;
  }
  // A few blocks per thread balance uneven blocks; no block is cheaper than kMinCostPerShard.
  const int64_t by_cost = static_cast<int64_t>(work / kMinCostPerShard);
  const int64_t shards = std::max<int64_t>(
      1, std::min<int64_t>({static_cast<int64_t>(threads) * 4, by_cost, total}));
  const int64_t block = (total + shards - 1) / shards;
  const int64_t blocks = (total + block - 1) / block;
  thread_pool()->run(blocks, [&](int64_t b) {
    const int64_t start = b * block;
    fn(start, std::min(total, start + block));
  });
}

}  // namespace opmarket
