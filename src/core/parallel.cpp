// A persistent thread pool: the caller and the workers take chunk indices from one atomic
// counter, so a parallel_for costs a wake-up, not thread creation.
#include "core/parallel.h"

#include <tnn/runtime.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <exception>
#include <memory>
#include <mutex>
#include <thread>

namespace tnn {
namespace {

thread_local bool t_inside_pool_task = false;

// One parallel region. Workers hold it by shared_ptr and take chunks from its own counter, so a
// late worker can never run a finished region's task.
struct Job {
    const std::function<void(int64_t)>* task;
    int64_t n_chunks;
    std::atomic<int64_t> next{0};
    std::atomic<int64_t> done{0};
    std::mutex error_mutex;
    std::exception_ptr error;
};

class ThreadPool {
public:
    explicit ThreadPool(int n_threads) { resize(n_threads); }
    ~ThreadPool() { stop_workers(); }

    int size() const { return static_cast<int>(m_workers.size()) + 1; }

    void resize(int n_threads) {
        std::lock_guard<std::mutex> run_lock(m_run_mutex);
        stop_workers();
        m_stop = false;
        for (int i = 1; i < std::max(1, n_threads); ++i) m_workers.emplace_back([this] { worker_loop(); });
    }

    void run(int64_t n_chunks, const std::function<void(int64_t)>& task) {
        std::lock_guard<std::mutex> run_lock(m_run_mutex);  // one parallel region at a time
        auto job = std::make_shared<Job>();
        job->task = &task;
        job->n_chunks = n_chunks;
        {
            std::lock_guard<std::mutex> lock(m_mutex);
            m_job = job;
            ++m_generation;
        }
        m_cv.notify_all();
        work(*job);
        {
            std::unique_lock<std::mutex> lock(m_mutex);
            m_done_cv.wait(lock, [&] { return job->done.load() == n_chunks; });
            m_job.reset();
        }
        if (job->error) std::rethrow_exception(job->error);
    }

private:
    void work(Job& job) {
        t_inside_pool_task = true;
        for (int64_t c; (c = job.next.fetch_add(1)) < job.n_chunks;) {
            try {
                (*job.task)(c);
            } catch (...) {
                std::lock_guard<std::mutex> lock(job.error_mutex);
                if (!job.error) job.error = std::current_exception();
            }
            if (job.done.fetch_add(1) + 1 == job.n_chunks) {
                std::lock_guard<std::mutex> lock(m_mutex);
                m_done_cv.notify_all();
            }
        }
        t_inside_pool_task = false;
    }

    void worker_loop() {
        uint64_t seen = 0;
        for (;;) {
            std::shared_ptr<Job> job;
            {
                std::unique_lock<std::mutex> lock(m_mutex);
                m_cv.wait(lock, [&] { return m_stop || (m_generation != seen && m_job); });
                if (m_stop) return;
                seen = m_generation;
                job = m_job;
            }
            work(*job);
        }
    }

    void stop_workers() {
        {
            std::lock_guard<std::mutex> lock(m_mutex);
            m_stop = true;
        }
        m_cv.notify_all();
        for (auto& t : m_workers) t.join();
        m_workers.clear();
    }

    std::vector<std::thread> m_workers;
    std::mutex m_mutex, m_run_mutex;
    std::condition_variable m_cv, m_done_cv;
    std::shared_ptr<Job> m_job;
    uint64_t m_generation = 0;
    bool m_stop = false;
};

int default_threads() { return static_cast<int>(std::max(1u, std::thread::hardware_concurrency())); }

ThreadPool& pool() {
    static ThreadPool p(default_threads());
    return p;
}

}  // namespace

void set_num_threads(int n) { pool().resize(n <= 0 ? default_threads() : n); }
int num_threads() { return pool().size(); }

void parallel_for(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& f) {
    if (n <= 0) return;
    grain = std::max<int64_t>(1, grain);
    const int64_t chunks = chunk_count(n, grain);
    if (chunks == 1 || t_inside_pool_task || pool().size() == 1) {
        for (int64_t c = 0; c < chunks; ++c) f(c * grain, std::min(n, (c + 1) * grain));
        return;
    }
    pool().run(chunks, [&](int64_t c) { f(c * grain, std::min(n, (c + 1) * grain)); });
}

}  // namespace tnn
