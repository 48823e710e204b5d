//! The event bus: typed events dispatched to handlers in registration order.
//!
//! A handler registered for an event type receives that type; one registered
//! with [`EventBus::on_any`] observes every event. Handlers may change the event
//! (that is how `BeforeToolCall` denies or rewrites a call); once an event
//! reports [`AgentEvent::stopped`] (a decision was made) later handlers are
//! skipped. A handler's error ends the dispatch and is returned to the emitter,
//! which for loop events means the run fails with it.
//!
//! Users define their own events by implementing [`AgentEvent`] and emitting
//! them with [`EventBus::emit`]; tools reach the run's bus through
//! [`ToolContext::events`](super::ToolContext::events).
//!
//! The bus is the agent's (re-exported as `bub::agent::EventBus`; the loop's
//! events are `bub::agent::events`), but it is defined here, below the
//! agent, because tools emit on it and tools never see the agent. It knows
//! nothing of either: a typed dispatcher.

use futures::future::BoxFuture;
use parking_lot::RwLock;
use std::any::{Any, TypeId};
use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

/// An error raised by a handler.
pub type HandlerError = Box<dyn std::error::Error + Send + Sync + 'static>;

/// Something that can travel on the bus.
pub trait AgentEvent: Any + Send + Sync {
    /// A stable name for logs (`before_tool_call`).
    fn event_name(&self) -> &'static str;

    /// True once a handler has decided: later handlers are skipped.
    fn stopped(&self) -> bool {
        false
    }
}

/// Identifies a registration, for [`EventBus::off`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct HandlerId(u64);

type Erased = Box<dyn Any + Send>;
type ErasedHandler = Arc<dyn Fn(Erased) -> BoxFuture<'static, Result<Erased, HandlerError>> + Send + Sync>;
type AnyObserver = Arc<dyn Fn(&dyn AgentEvent) + Send + Sync>;

enum Handler {
    Typed(TypeId, ErasedHandler),
    Any(AnyObserver),
}

/// Shared by an agent and every run it starts. Cloning shares the handlers.
#[derive(Clone, Default)]
pub struct EventBus {
    handlers: Arc<RwLock<Vec<(HandlerId, Handler)>>>,
    next_id: Arc<AtomicU64>,
}

impl EventBus {
    pub fn new() -> EventBus {
        EventBus::default()
    }

    fn register(&self, handler: Handler) -> HandlerId {
        let id = HandlerId(self.next_id.fetch_add(1, Ordering::Relaxed));
        self.handlers.write().push((id, handler));
        id
    }

    /// Registers an async handler. It receives the event by value and returns it
    /// (changed or not), so it can hold it across awaits.
    pub fn on<E, F, Fut>(&self, handler: F) -> HandlerId
    where
        E: AgentEvent,
        F: Fn(E) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<E, HandlerError>> + Send + 'static,
    {
        let handler = Arc::new(handler);
        let erased: ErasedHandler = Arc::new(move |event: Erased| {
            let handler = handler.clone();
            Box::pin(async move {
                let event = *event.downcast::<E>().map_err(|_| "event bus: handler got another event type")?;
                let event = handler(event).await?;
                Ok(Box::new(event) as Erased)
            })
        });
        self.register(Handler::Typed(TypeId::of::<E>(), erased))
    }

    /// Registers a synchronous handler that may change the event in place.
    pub fn on_sync<E, F>(&self, handler: F) -> HandlerId
    where
        E: AgentEvent,
        F: Fn(&mut E) -> Result<(), HandlerError> + Send + Sync + 'static,
    {
        let handler = Arc::new(handler);
        self.on(move |mut event: E| {
            let result = handler(&mut event);
            async move { result.map(|()| event) }
        })
    }

    /// Registers an observer of every event (it cannot change them).
    pub fn on_any<F>(&self, observer: F) -> HandlerId
    where
        F: Fn(&dyn AgentEvent) + Send + Sync + 'static,
    {
        self.register(Handler::Any(Arc::new(observer)))
    }

    /// Removes a registration; unknown ids are ignored.
    pub fn off(&self, id: HandlerId) {
        self.handlers.write().retain(|(h, _)| *h != id);
    }

    /// Dispatches `event` and returns it as the handlers left it.
    pub async fn emit<E: AgentEvent>(&self, event: E) -> Result<E, HandlerError> {
        // Snapshot so handlers may (un)register while we dispatch.
        let handlers: Vec<Handler> = self
            .handlers
            .read()
            .iter()
            .filter_map(|(_, h)| match h {
                Handler::Typed(type_id, f) if *type_id == TypeId::of::<E>() => {
                    Some(Handler::Typed(*type_id, f.clone()))
                }
                Handler::Typed(..) => None,
                Handler::Any(f) => Some(Handler::Any(f.clone())),
            })
            .collect();
        let mut event = event;
        for handler in handlers {
            if event.stopped() {
                break;
            }
            match handler {
                Handler::Any(observe) => observe(&event),
                Handler::Typed(_, handle) => {
                    let returned = handle(Box::new(event)).await?;
                    event = *returned.downcast::<E>().map_err(|_| "event bus: handler returned another event type")?;
                }
            }
        }
        Ok(event)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use parking_lot::Mutex;

    #[derive(Debug, Default)]
    struct Vote {
        decision: Option<&'static str>,
        seen_by: Vec<&'static str>,
    }

    impl AgentEvent for Vote {
        fn event_name(&self) -> &'static str {
            "vote"
        }
        fn stopped(&self) -> bool {
            self.decision.is_some()
        }
    }

    #[tokio::test]
    async fn handlers_run_in_order_and_a_decision_stops_dispatch() {
        let bus = EventBus::new();
        bus.on_sync(|v: &mut Vote| {
            v.seen_by.push("first");
            Ok(())
        });
        bus.on(|mut v: Vote| async move {
            v.seen_by.push("second");
            v.decision = Some("no");
            Ok(v)
        });
        bus.on_sync(|v: &mut Vote| {
            v.seen_by.push("third");
            Ok(())
        });
        let vote = bus.emit(Vote::default()).await.unwrap();
        assert_eq!(vote.seen_by, vec!["first", "second"]);
        assert_eq!(vote.decision, Some("no"));
    }

    #[tokio::test]
    async fn observers_see_every_event_and_off_unregisters() {
        let bus = EventBus::new();
        let seen = Arc::new(Mutex::new(Vec::new()));
        let log = seen.clone();
        let id = bus.on_any(move |e| log.lock().push(e.event_name()));
        bus.emit(Vote::default()).await.unwrap();
        bus.off(id);
        bus.emit(Vote::default()).await.unwrap();
        assert_eq!(*seen.lock(), vec!["vote"]);
    }

    #[tokio::test]
    async fn a_failing_handler_ends_dispatch_with_its_error() {
        let bus = EventBus::new();
        bus.on_sync(|_: &mut Vote| Err("policy store unreachable".into()));
        let error = bus.emit(Vote::default()).await.unwrap_err();
        assert_eq!(error.to_string(), "policy store unreachable");
    }
}
