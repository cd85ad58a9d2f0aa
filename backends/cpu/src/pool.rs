//! A persistent pool of worker threads that share one job at a time with the calling
//! thread: kernels wake parked workers instead of spawning threads on every call.
//!
//! A job is a closure that pulls work from a shared source until none is left, so any
//! number of participants (the caller alone included) finishes it: helpers that wake late
//! find nothing to do, and a call from inside a job (or while another thread's job runs)
//! simply runs the closure on its own thread.
//!
//! Between jobs a worker first spins for a while on the job counter, then parks; the
//! caller likewise spins before it sleeps on the workers' end. A training step's kernels
//! follow each other closely, so a job mostly reaches a spinning worker, without the
//! futex wake-up and rescheduling that made splitting anything but the largest kernels a
//! loss.

use std::any::Any;
use std::panic::{self, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Condvar, Mutex, MutexGuard, PoisonError};
use std::thread::JoinHandle;

/// A job as the workers see it: its lifetime is erased, and [`Pool::run`] does not return
/// before every worker that picked it up has finished with it.
type Job = &'static (dyn Fn() + Sync);

/// What the caller and the workers share under one lock.
#[derive(Default)]
struct State {
    /// The job of the current call, while helpers may still join it.
    job: Option<Job>,
    /// How many more workers may join the current job.
    seats: usize,
    /// Workers parked on `wake`.
    sleepers: usize,
    /// Whether the caller sleeps on `done`.
    waiting: bool,
    /// The first panic of a worker inside the current job.
    panic: Option<Box<dyn Any + Send>>,
}

/// The lock, the counters spinning threads read without it, and the signals of parked ones.
#[derive(Default)]
struct Shared {
    state: Mutex<State>,
    /// Counts calls (changed under the lock), so that a worker joins each job at most once;
    /// spinning workers watch it.
    generation: AtomicU64,
    /// Workers inside the current job (incremented under the lock); the caller watches it.
    running: AtomicUsize,
    /// Set (under the lock) when the pool is dropped: workers return, spinning ones at once.
    shutdown: AtomicBool,
    wake: Condvar,
    done: Condvar,
}

impl Shared {
    /// The state; a poisoned lock is taken over (no code panics while holding it).
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// Checks of a counter a thread spins through before it parks: a few tens of microseconds,
/// longer than the gap between two kernels of a step, far shorter than a step (a few
/// under Miri, which interprets every one).
const SPINS: u32 = if cfg!(miri) { 1 << 4 } else { 1 << 14 };

/// Spins until `ready()` holds or [`SPINS`] checks have failed; returns whether it holds.
/// Every 64th check yields the core instead: on a machine with more runnable threads than
/// cores, the thread this one waits for may be waiting for this one's core.
fn spin_until(ready: impl Fn() -> bool) -> bool {
    for i in 0..SPINS {
        if ready() {
            return true;
        }
        if i % 64 == 63 {
            std::thread::yield_now();
        } else {
            std::hint::spin_loop();
        }
    }
    ready()
}

/// Work (multiply-accumulates, or values an element-wise pass touches) each worker of a
/// kernel must get before a second thread joins it: 64 Ki, some microseconds of one core,
/// several times what handing a job to a spinning worker and waiting for it costs.
const MIN_WORK_PER_WORKER: usize = 1 << 16;

/// `threads - 1` parked worker threads plus the caller; dropping the pool stops and joins
/// the workers.
pub struct Pool {
    shared: std::sync::Arc<Shared>,
    /// Work each worker of a kernel must get (see [`MIN_WORK_PER_WORKER`]).
    min_work: usize,
    /// Held by the thread whose job the workers serve.
    busy: Mutex<()>,
    workers: Vec<JoinHandle<()>>,
}

impl Pool {
    /// A pool of `threads` threads in all (the caller and `threads - 1` workers).
    pub fn new(threads: usize) -> Self {
        Self::with_min_work(threads, MIN_WORK_PER_WORKER)
    }

    /// A pool that wakes a worker for any work at all: tests split tiny kernels with it.
    #[cfg(test)]
    pub fn eager(threads: usize) -> Self {
        Self::with_min_work(threads, 1)
    }

    fn with_min_work(threads: usize, min_work: usize) -> Self {
        let shared = std::sync::Arc::new(Shared::default());
        let workers = (1..threads.max(1))
            .map(|i| {
                let shared = shared.clone();
                std::thread::Builder::new()
                    .name(format!("sprout-cpu-{i}"))
                    .spawn(move || work(&shared))
                    .expect("starting a sprout-cpu worker thread")
            })
            .collect();
        Self { shared, min_work, busy: Mutex::new(()), workers }
    }

    /// Threads a job may run on, the caller's included.
    pub fn threads(&self) -> usize {
        self.workers.len() + 1
    }

    /// Work each worker of a kernel must get before a second thread joins it.
    pub fn min_work(&self) -> usize {
        self.min_work
    }

    /// Runs `job` on the calling thread and on up to `helpers` workers at once, returning
    /// when every one of them has returned. `job` must pull its work from a shared source
    /// until none is left: it runs on the caller alone when the workers are busy with
    /// another call (a nested one included). A panic in any participant is raised here,
    /// after all of them have finished.
    pub fn run(&self, helpers: usize, job: &(dyn Fn() + Sync)) {
        let helpers = helpers.min(self.workers.len());
        let _busy = match self.busy.try_lock() {
            Ok(guard) if helpers > 0 => guard,
            _ => return job(),
        };
        // SAFETY: only the lifetime is changed. Workers call the job only after taking a
        // seat below and before leaving `running`; this function clears the job and waits
        // for `running` to reach zero before it returns or unwinds, so no worker uses the
        // reference after the borrow ends.
        let erased: Job = unsafe { std::mem::transmute::<&(dyn Fn() + Sync), Job>(job) };
        let shared = &*self.shared;
        let sleepers = {
            let mut state = shared.lock();
            state.job = Some(erased);
            state.seats = helpers;
            shared.generation.fetch_add(1, Ordering::Release);
            state.sleepers
        };
        if sleepers > 0 {
            shared.wake.notify_all();
        }
        let own = panic::catch_unwind(AssertUnwindSafe(job));
        {
            let mut state = shared.lock();
            state.job = None;
            state.seats = 0;
        }
        let worker_panic = {
            let finished = spin_until(|| shared.running.load(Ordering::Acquire) == 0);
            let mut state = shared.lock();
            if !finished {
                while shared.running.load(Ordering::Acquire) > 0 {
                    state.waiting = true;
                    state = shared.done.wait(state).unwrap_or_else(PoisonError::into_inner);
                }
                state.waiting = false;
            }
            state.panic.take()
        };
        if let Err(payload) = own {
            panic::resume_unwind(payload);
        }
        if let Some(payload) = worker_panic {
            panic::resume_unwind(payload);
        }
    }
}

/// A worker: spins, then parks, until a new job has a free seat, runs it, and reports back.
fn work(shared: &Shared) {
    let mut seen = 0u64;
    loop {
        spin_until(|| {
            shared.generation.load(Ordering::Acquire) != seen
                || shared.shutdown.load(Ordering::Relaxed)
        });
        let job = {
            let mut state = shared.lock();
            loop {
                if shared.shutdown.load(Ordering::Relaxed) {
                    return;
                }
                let generation = shared.generation.load(Ordering::Acquire);
                if generation != seen {
                    seen = generation;
                    break match (state.job, state.seats > 0) {
                        (Some(job), true) => {
                            state.seats -= 1;
                            shared.running.fetch_add(1, Ordering::Relaxed);
                            Some(job)
                        }
                        // Gone or full: spin for the next one.
                        _ => None,
                    };
                }
                state.sleepers += 1;
                state = shared.wake.wait(state).unwrap_or_else(PoisonError::into_inner);
                state.sleepers -= 1;
            }
        };
        let Some(job) = job else { continue };
        if let Err(payload) = panic::catch_unwind(AssertUnwindSafe(job)) {
            shared.lock().panic.get_or_insert(payload);
        }
        if shared.running.fetch_sub(1, Ordering::Release) == 1 {
            // Under the lock, so that a caller about to sleep either sees `running` at zero
            // or is already waiting for this signal.
            if shared.lock().waiting {
                shared.done.notify_all();
            }
        }
    }
}

impl Drop for Pool {
    fn drop(&mut self) {
        {
            // Under the lock, so that no worker checks it just before it parks.
            let _state = self.shared.lock();
            self.shared.shutdown.store(true, Ordering::Relaxed);
        }
        self.shared.wake.notify_all();
        for worker in self.workers.drain(..) {
            // A worker only ends by returning (jobs' panics are caught), so join succeeds.
            let _ = worker.join();
        }
    }
}

impl std::fmt::Debug for Pool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pool").field("threads", &self.threads()).finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;
    use std::sync::atomic::{AtomicUsize, Ordering};

    /// Runs `items` unit tasks through `pool`, pulling them from a shared counter; returns
    /// how many ran and on how many distinct threads.
    fn pull(pool: &Pool, helpers: usize, items: usize) -> (usize, usize) {
        let next = AtomicUsize::new(0);
        let done = AtomicUsize::new(0);
        let threads = Mutex::new(HashSet::new());
        pool.run(helpers, &|| {
            let mut mine = 0;
            while next.fetch_add(1, Ordering::Relaxed) < items {
                done.fetch_add(1, Ordering::Relaxed);
                mine += 1;
                // Long enough for a worker to wake and take part.
                std::thread::sleep(std::time::Duration::from_millis(1));
            }
            if mine > 0 {
                threads.lock().unwrap().insert(std::thread::current().id());
            }
        });
        (done.into_inner(), threads.into_inner().unwrap().len())
    }

    #[test]
    fn every_task_runs_once_and_workers_help() {
        let pool = Pool::new(3);
        assert_eq!(pool.threads(), 3);
        for _ in 0..3 {
            let (done, threads) = pull(&pool, 2, 40);
            assert_eq!(done, 40);
            assert!((1..=3).contains(&threads), "{threads} threads");
        }
        // No helpers wanted: the caller alone.
        assert_eq!(pull(&pool, 0, 5), (5, 1));
    }

    #[test]
    fn a_nested_call_runs_on_its_own_thread() {
        let pool = Pool::new(2);
        let total = AtomicUsize::new(0);
        pool.run(1, &|| {
            let (done, threads) = pull(&pool, 1, 3);
            assert_eq!((done, threads), (3, 1));
            total.fetch_add(done, Ordering::Relaxed);
        });
        assert!(matches!(total.into_inner(), 3 | 6));
    }

    #[test]
    fn a_panic_reaches_the_caller_and_the_pool_keeps_working() {
        let pool = Pool::new(2);
        let caught = panic::catch_unwind(AssertUnwindSafe(|| {
            pool.run(1, &|| panic!("task failed"));
        }));
        let message = caught.unwrap_err();
        assert_eq!(message.downcast_ref::<&str>(), Some(&"task failed"));
        assert_eq!(pull(&pool, 1, 4).0, 4);
    }
}
