//! `Loader`: turns a `Dataset` into `[N, 3, S, S]` input and label batches through a pool of
//! decoding threads that read, resize and transform samples a bounded number of batches ahead
//! (PyTorch's `DataLoader` with workers), in a seeded order that the worker count never changes.

use std::collections::BTreeMap;
use std::panic::AssertUnwindSafe;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;

use crate::cache::{Cache, CacheMode, Key};
use crate::decode::load_counted;
use crate::error::DataError;
use crate::folder::Dataset;
use crate::limits::Limits;
use crate::resize::ResizeMode;
use crate::rng::Rng;
use crate::transform::Transform;

/// One batch: `x` holds `len` images of `[3, size, size]` back to back, `y` their labels.
#[derive(Clone, Debug, PartialEq)]
pub struct Batch {
    pub x: Vec<f32>,
    pub y: Vec<i32>,
}

impl Batch {
    /// Samples in the batch.
    pub fn len(&self) -> usize {
        self.y.len()
    }

    /// Whether the batch has no samples.
    pub fn is_empty(&self) -> bool {
        self.y.is_empty()
    }
}

/// How samples are read: resizing, threads, read-ahead, cache and file limits.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Pipeline {
    pub resize: ResizeMode,
    /// Decoding threads (at least 1).
    pub workers: usize,
    /// Batches prepared ahead of the one being handed out (at least 1).
    pub prefetch: usize,
    pub cache: CacheMode,
    pub limits: Limits,
}

impl Default for Pipeline {
    /// Centre crops, a thread per core, two batches ahead, the default memory cache, the
    /// process's limits.
    fn default() -> Self {
        Self {
            resize: ResizeMode::Crop,
            workers: std::thread::available_parallelism().map_or(1, |n| n.get()),
            prefetch: 2,
            cache: CacheMode::default(),
            limits: Limits::current(),
        }
    }
}

/// Batches of a data set: every sample once per epoch, the last batch possibly smaller.
pub struct Loader {
    shared: Arc<Fixed>,
    batch_size: usize,
    workers: usize,
    prefetch: usize,
    shuffle: bool,
}

/// What every epoch's workers share.
struct Fixed {
    dataset: Dataset,
    transform: Transform,
    seed: u64,
    resize: ResizeMode,
    limits: Limits,
    cache: Cache,
}

impl Loader {
    /// Shuffled batches of `batch_size` (at least 1), the order and augmentations derived from
    /// `seed` and the epoch. Fails only when a disk cache's folder cannot be made.
    pub fn new(
        dataset: Dataset,
        transform: Transform,
        batch_size: usize,
        seed: u64,
        pipeline: &Pipeline,
    ) -> Result<Self, DataError> {
        let cache = Cache::open(&pipeline.cache)?;
        let (resize, limits) = (pipeline.resize, pipeline.limits);
        Ok(Self {
            shared: Arc::new(Fixed { dataset, transform, seed, resize, limits, cache }),
            batch_size: batch_size.max(1),
            workers: pipeline.workers.max(1),
            prefetch: pipeline.prefetch.max(1),
            shuffle: true,
        })
    }

    /// Keeps the data set's order (class by class) in every epoch.
    pub fn no_shuffle(mut self) -> Self {
        self.shuffle = false;
        self
    }

    pub fn dataset(&self) -> &Dataset {
        &self.shared.dataset
    }

    /// Batches per epoch.
    pub fn batches(&self) -> usize {
        self.dataset().len().div_ceil(self.batch_size)
    }

    /// Bytes of resized pictures the memory cache holds.
    pub fn cached_bytes(&self) -> usize {
        self.shared.cache.memory_bytes()
    }

    /// The sample indices of `epoch`, in the order they are batched.
    pub fn order(&self, epoch: u64) -> Vec<usize> {
        let mut order: Vec<usize> = (0..self.dataset().len()).collect();
        if self.shuffle {
            Rng::derive(self.shared.seed, epoch).shuffle(&mut order);
        }
        order
    }

    /// The batches of `epoch`; the workers start at once and stop when it is dropped.
    pub fn epoch(&mut self, epoch: u64) -> Epoch {
        let order = Arc::new(self.order(epoch));
        let window = self.prefetch * self.batch_size;
        let state = Arc::new(State {
            queue: Mutex::new(Queue { working: vec![0; self.workers], ..Queue::default() }),
            work: Condvar::new(),
            ready: Condvar::new(),
        });
        let workers = (0..self.workers)
            .map(|worker| {
                let (fixed, order, state) = (self.shared.clone(), order.clone(), state.clone());
                std::thread::spawn(move || work(worker, &fixed, &order, epoch, window, &state))
            })
            .collect();
        Epoch { fixed: self.shared.clone(), order, state, workers, next: 0, batch: self.batch_size }
    }
}

/// The hand-over between the workers and the epoch.
struct State {
    queue: Mutex<Queue>,
    /// Signalled when a worker may claim more.
    work: Condvar,
    /// Signalled when a sample is done.
    ready: Condvar,
}

#[derive(Default)]
struct Queue {
    /// The next position of the order to claim.
    claimed: usize,
    /// Positions before this have been handed out.
    delivered: usize,
    /// Finished samples by position.
    done: BTreeMap<usize, Result<Vec<f32>, DataError>>,
    /// Bytes of the finished samples.
    done_bytes: usize,
    /// Bytes each worker holds for the sample it is on.
    working: Vec<usize>,
    /// The most bytes `done_bytes` and `working` held together.
    peak: usize,
    stop: bool,
}

impl Queue {
    fn note_peak(&mut self) {
        self.peak = self.peak.max(self.done_bytes + self.working.iter().sum::<usize>());
    }
}

fn lock(state: &State) -> MutexGuard<'_, Queue> {
    state.queue.lock().expect("a worker panicked")
}

/// A worker: claims positions no more than `window` past the last one handed out, and
/// prepares each sample.
fn work(worker: usize, fixed: &Fixed, order: &[usize], epoch: u64, window: usize, state: &State) {
    loop {
        let position = {
            let mut queue = lock(state);
            while !queue.stop
                && queue.claimed < order.len()
                && queue.claimed >= queue.delivered + window
            {
                queue = state.work.wait(queue).expect("the epoch panicked");
            }
            if queue.stop || queue.claimed >= order.len() {
                return;
            }
            queue.claimed += 1;
            queue.claimed - 1
        };
        let index = order[position];
        let (sample, held) =
            std::panic::catch_unwind(AssertUnwindSafe(|| fixed.sample(index, epoch)))
                .unwrap_or_else(|_| {
                    let path = fixed.dataset.samples[index].0.clone();
                    (Err(DataError::Decode { path, reason: "the decoder crashed".into() }), 0)
                });
        let mut queue = lock(state);
        queue.working[worker] = held;
        queue.note_peak();
        queue.working[worker] = 0;
        queue.done_bytes += bytes(&sample);
        queue.done.insert(position, sample);
        queue.note_peak();
        state.ready.notify_all();
    }
}

fn bytes(sample: &Result<Vec<f32>, DataError>) -> usize {
    sample.as_ref().map_or(0, |x| std::mem::size_of_val(x.as_slice()))
}

impl Fixed {
    /// Sample `index` as network input for `epoch`, and the most bytes held preparing it.
    fn sample(&self, index: usize, epoch: u64) -> (Result<Vec<f32>, DataError>, usize) {
        let size = self.transform.size;
        let path = &self.dataset.samples[index].0;
        let key = Key { index, path, width: size, height: size, mode: self.resize };
        let (resized, held) = match self.cache.get(&key) {
            Some(resized) => (resized, 0),
            None => match load_counted(path, size, size, self.resize, &self.limits) {
                Ok((resized, held)) => {
                    if let Err(error) = self.cache.put(&key, &resized) {
                        return (Err(error), held);
                    }
                    (resized, held)
                }
                Err(error) => return (Err(error), 0),
            },
        };
        // Augmentation depends on the sample and the epoch only, not on batches or workers.
        let mut rng = Rng::derive(self.seed ^ epoch.rotate_left(32), index as u64);
        let mut x = Vec::with_capacity(3 * resized.len());
        self.transform.apply(&resized, &mut rng, &mut x);
        let held = held.max(resized.len() + std::mem::size_of_val(x.as_slice()));
        (Ok(x), held)
    }
}

/// The batches of one epoch, as an iterator; a sample that fails to load ends its batch with
/// the error.
pub struct Epoch {
    fixed: Arc<Fixed>,
    order: Arc<Vec<usize>>,
    state: Arc<State>,
    workers: Vec<JoinHandle<()>>,
    next: usize,
    batch: usize,
}

impl Epoch {
    /// The most bytes the pipeline's own buffers (samples ready and samples being prepared)
    /// have held so far, caches and handed-out batches aside.
    pub fn peak_buffered_bytes(&self) -> usize {
        lock(&self.state).peak
    }

    /// Waits for the sample at `position` and takes it.
    fn take_sample(&self, position: usize) -> Result<Vec<f32>, DataError> {
        let mut queue = lock(&self.state);
        loop {
            if let Some(sample) = queue.done.remove(&position) {
                queue.done_bytes -= bytes(&sample);
                queue.delivered = position + 1;
                self.state.work.notify_all();
                return sample;
            }
            queue = self.state.ready.wait(queue).expect("a worker panicked");
        }
    }
}

impl Iterator for Epoch {
    type Item = Result<Batch, DataError>;

    fn next(&mut self) -> Option<Self::Item> {
        let end = (self.next + self.batch).min(self.order.len());
        if self.next >= end {
            return None;
        }
        let size = self.fixed.transform.size as usize;
        let mut batch =
            Batch { x: Vec::with_capacity((end - self.next) * 3 * size * size), y: Vec::new() };
        let mut failure = None;
        for position in self.next..end {
            // Every sample of the batch is taken, even after a failure, so the workers go on.
            match self.take_sample(position) {
                Ok(x) if failure.is_none() => {
                    batch.x.extend_from_slice(&x);
                    let index = self.order[position];
                    batch.y.push(self.fixed.dataset.samples[index].1 as i32);
                }
                Ok(_) => {}
                Err(error) => failure = failure.or(Some(error)),
            }
        }
        self.next = end;
        Some(failure.map_or(Ok(batch), Err))
    }
}

impl Drop for Epoch {
    fn drop(&mut self) {
        lock(&self.state).stop = true;
        self.state.work.notify_all();
        for worker in self.workers.drain(..) {
            // A worker that panicked has already reported it; the epoch is over either way.
            let _ = worker.join();
        }
    }
}
