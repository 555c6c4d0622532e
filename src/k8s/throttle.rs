//! A per-key throttle for reconcile triggers: the first trigger of a key after a quiet period
//! passes at once (leading edge), and every further trigger of that key within `window`
//! collapses into one trigger at the window's end (trailing edge), which opens the next window.
//! So a key passes at most twice per window, and a burst never postpones its first pass.
//!
//! Why not kube-runtime's debounce: it restarts its wait on every new trigger of a key, so while
//! a group of pods comes up (events closer together than the debounce) the reconcile slides
//! until the burst ends — hundreds of milliseconds before the worker StatefulSet of a leader pod
//! created early in the burst. Without any debounce every event reconciles, which costs CPU
//! and requests. The throttle bounds both: the latency of a trigger to at
//! most one window, and the reconciles to two per window per key.
//!
//! An *urgent* trigger (one a user waits on, such as a new leader pod without its workers)
//! passes at once even inside an open window, and covers what was pending; the window's end
//! stays where it was. The caller bounds how often a key is urgent (a leader is urgent once:
//! `lws::triggers`), so a key passes at most twice per window plus once per urgent cause. Every
//! urgent trigger passes, not only a window's first: leader pods of one LWS are created moments
//! apart, and each one's workers would otherwise wait for the window's end.
//!
//! The adapter keeps no state beyond open windows: nothing a restart would miss, since a
//! controller lists everything again after one.

use std::{
    collections::{HashMap, VecDeque},
    hash::Hash,
    pin::Pin,
    task::{Context, Poll},
    time::Duration,
};

use futures::{Stream, stream::FusedStream};
use tokio::time::{Instant, Sleep};

/// One trigger of a key.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Trigger<K> {
    /// What to pass.
    pub key: K,
    /// Passes at once even inside an open window.
    pub urgent: bool,
}

impl<K> Trigger<K> {
    /// A trigger that waits for its window.
    pub fn normal(key: K) -> Self {
        Self { key, urgent: false }
    }
}

/// One key's open window.
struct Window {
    /// When the window closes.
    ends: Instant,
    /// A trigger arrived after the window opened: pass the key once more when it closes.
    pending: bool,
}

/// The stream made by [`throttle`].
pub struct Throttle<S, K> {
    inner: S,
    inner_done: bool,
    window: Duration,
    open: HashMap<K, Window>,
    /// Window ends in the order they fall. Every window opens "now" and lasts `window`, so
    /// appending keeps the queue sorted; an entry whose key has since opened a newer window is
    /// stale and skipped.
    closing: VecDeque<(Instant, K)>,
    /// Keys passed but not yet taken by the consumer.
    ready: VecDeque<K>,
    timer: Pin<Box<Sleep>>,
}

/// Throttles `triggers` per key with windows of `window` (see the module docs).
pub fn throttle<S, K>(triggers: S, window: Duration) -> Throttle<S, K>
where
    S: Stream<Item = Trigger<K>> + Unpin,
    K: Clone + Eq + Hash + Unpin,
{
    Throttle {
        inner: triggers,
        inner_done: false,
        window,
        open: HashMap::new(),
        closing: VecDeque::new(),
        ready: VecDeque::new(),
        timer: Box::pin(tokio::time::sleep(Duration::ZERO)),
    }
}

impl<S, K> Throttle<S, K>
where
    K: Clone + Eq + Hash,
{
    /// A trigger at `now`.
    fn trigger(&mut self, Trigger { key, urgent }: Trigger<K>, now: Instant) {
        match self.open.get_mut(&key) {
            Some(w) if w.ends > now && urgent => {
                // Passes now; what was pending is covered by this pass, and the window's end
                // stays, so later triggers still wait for it.
                w.pending = false;
                self.ready.push_back(key);
            }
            Some(w) if w.ends > now => w.pending = true,
            // No window, or one whose end has not been processed yet: a leading pass.
            _ => self.pass(key, now),
        }
    }

    /// Passes `key` and opens its next window.
    fn pass(&mut self, key: K, now: Instant) {
        let ends = now + self.window;
        self.open.insert(
            key.clone(),
            Window {
                ends,
                pending: false,
            },
        );
        self.closing.push_back((ends, key.clone()));
        self.ready.push_back(key);
    }

    /// Closes the windows ended by `now`: a pending key passes (trailing edge), others are
    /// forgotten.
    fn close_ended(&mut self, now: Instant) {
        while let Some((ends, _)) = self.closing.front()
            && *ends <= now
        {
            let (ends, key) = self.closing.pop_front().expect("front exists");
            match self.open.get(&key) {
                Some(w) if w.ends == ends && w.pending => self.pass(key, now),
                Some(w) if w.ends == ends => {
                    self.open.remove(&key);
                }
                // Stale: the key opened a newer window since.
                _ => {}
            }
        }
    }
}

impl<S, K> Stream for Throttle<S, K>
where
    S: Stream<Item = Trigger<K>> + Unpin,
    K: Clone + Eq + Hash + Unpin,
{
    type Item = K;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<K>> {
        let this = self.get_mut();
        loop {
            while !this.inner_done {
                match Pin::new(&mut this.inner).poll_next(cx) {
                    Poll::Ready(Some(trigger)) => this.trigger(trigger, Instant::now()),
                    Poll::Ready(None) => this.inner_done = true,
                    Poll::Pending => break,
                }
            }
            this.close_ended(Instant::now());
            if let Some(key) = this.ready.pop_front() {
                return Poll::Ready(Some(key));
            }
            // The triggers ended: what is still pending is dropped, as the consumer is
            // shutting down.
            if this.inner_done {
                return Poll::Ready(None);
            }
            let Some((ends, _)) = this.closing.front() else {
                return Poll::Pending;
            };
            this.timer.as_mut().reset(*ends);
            if this.timer.as_mut().poll(cx).is_pending() {
                return Poll::Pending;
            }
        }
    }
}

impl<S, K> FusedStream for Throttle<S, K>
where
    S: Stream<Item = Trigger<K>> + Unpin,
    K: Clone + Eq + Hash + Unpin,
{
    fn is_terminated(&self) -> bool {
        self.inner_done && self.ready.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use futures::StreamExt;
    use tokio::{sync::mpsc, time::Instant};

    use super::{Trigger, throttle};

    const WINDOW: Duration = Duration::from_millis(100);

    /// A throttle over a channel, and the times (since `start`) at which keys come out.
    fn harness() -> (
        mpsc::UnboundedSender<Trigger<&'static str>>,
        mpsc::UnboundedReceiver<(&'static str, Duration)>,
    ) {
        let (tx, mut rx) = mpsc::unbounded_channel();
        let (out_tx, out_rx) = mpsc::unbounded_channel();
        let start = Instant::now();
        let triggers = futures::stream::poll_fn(move |cx| rx.poll_recv(cx));
        tokio::spawn(async move {
            let mut throttled = throttle(triggers, WINDOW);
            while let Some(key) = throttled.next().await {
                let _ = out_tx.send((key, start.elapsed()));
            }
        });
        (tx, out_rx)
    }

    /// Everything that came out by now.
    fn drain(
        rx: &mut mpsc::UnboundedReceiver<(&'static str, Duration)>,
    ) -> Vec<(&'static str, u64)> {
        let mut out = Vec::new();
        while let Ok((key, at)) = rx.try_recv() {
            out.push((key, at.as_millis() as u64));
        }
        out
    }

    async fn advance(ms: u64) {
        tokio::time::sleep(Duration::from_millis(ms)).await;
    }

    #[tokio::test(start_paused = true)]
    async fn first_trigger_passes_at_once() {
        let (tx, mut out) = harness();
        tx.send(Trigger::normal("a")).unwrap();
        advance(1).await;
        assert_eq!(drain(&mut out), vec![("a", 0)]);
        // Nothing more without further triggers.
        advance(500).await;
        assert_eq!(drain(&mut out), vec![]);
    }

    #[tokio::test(start_paused = true)]
    async fn a_burst_collapses_into_one_trailing_pass_at_the_window_end() {
        let (tx, mut out) = harness();
        tx.send(Trigger::normal("a")).unwrap();
        for _ in 0..5 {
            advance(15).await;
            tx.send(Trigger::normal("a")).unwrap();
        }
        advance(150).await;
        assert_eq!(drain(&mut out), vec![("a", 0), ("a", 100)]);
        // The trailing pass opened a window of its own, which closed quietly: the next
        // trigger is a leading pass again.
        advance(100).await;
        tx.send(Trigger::normal("a")).unwrap();
        advance(1).await;
        assert_eq!(drain(&mut out), vec![("a", 325)]);
    }

    #[tokio::test(start_paused = true)]
    async fn a_continuous_burst_passes_once_per_window() {
        let (tx, mut out) = harness();
        for _ in 0..30 {
            tx.send(Trigger::normal("a")).unwrap();
            advance(10).await;
        }
        advance(300).await;
        // Triggers at 0..=290 ms: leading at 0, then one at each window end while triggers
        // keep coming, and the last one for the triggers of 210..=290.
        assert_eq!(
            drain(&mut out),
            vec![("a", 0), ("a", 100), ("a", 200), ("a", 300)]
        );
    }

    #[tokio::test(start_paused = true)]
    async fn keys_are_throttled_independently() {
        let (tx, mut out) = harness();
        tx.send(Trigger::normal("a")).unwrap();
        advance(30).await;
        tx.send(Trigger::normal("a")).unwrap();
        tx.send(Trigger::normal("b")).unwrap();
        advance(30).await;
        tx.send(Trigger::normal("b")).unwrap();
        advance(200).await;
        assert_eq!(
            drain(&mut out),
            vec![("a", 0), ("b", 30), ("a", 100), ("b", 130)]
        );
    }

    #[tokio::test(start_paused = true)]
    async fn ends_when_the_triggers_end() {
        let triggers = futures::stream::iter(["a", "a", "b"].map(Trigger::normal));
        let passed: Vec<_> = throttle(triggers, WINDOW).collect().await;
        // The pending trailing pass of "a" is dropped with the ended input.
        assert_eq!(passed, vec!["a", "b"]);
    }

    fn urgent(key: &'static str) -> Trigger<&'static str> {
        Trigger { key, urgent: true }
    }

    #[tokio::test(start_paused = true)]
    async fn every_urgent_trigger_passes_at_once() {
        let (tx, mut out) = harness();
        tx.send(Trigger::normal("a")).unwrap();
        advance(20).await;
        tx.send(Trigger::normal("a")).unwrap();
        advance(20).await;
        // Cuts the window short, and covers the pending trigger of 20 ms.
        tx.send(urgent("a")).unwrap();
        advance(20).await;
        // A second urgent trigger in the same window (the next leader of the LWS) too.
        tx.send(urgent("a")).unwrap();
        advance(10).await;
        // A normal one after it waits for the window's end, which the urgent ones did not move.
        tx.send(Trigger::normal("a")).unwrap();
        advance(200).await;
        assert_eq!(
            drain(&mut out),
            vec![("a", 0), ("a", 40), ("a", 60), ("a", 100)]
        );
    }

    #[tokio::test(start_paused = true)]
    async fn an_urgent_trigger_leaves_nothing_pending_by_itself() {
        let (tx, mut out) = harness();
        tx.send(Trigger::normal("a")).unwrap();
        advance(30).await;
        tx.send(urgent("a")).unwrap();
        advance(300).await;
        // No trailing pass: the urgent one covered every trigger of the window.
        assert_eq!(drain(&mut out), vec![("a", 0), ("a", 30)]);
        // The next window is a fresh one: its urgent trigger leads it, and another may cut it.
        tx.send(urgent("a")).unwrap();
        advance(10).await;
        tx.send(urgent("a")).unwrap();
        advance(1).await;
        assert_eq!(drain(&mut out), vec![("a", 330), ("a", 340)]);
    }
}
