//! Turn state: the per-run values shared by prompt sections, tools and event
//! handlers. Not persisted: what must survive goes on the tape.
//!
//! It lives with the tools, not the agent, because tools read and write it
//! ([`ToolContext::state`](super::ToolContext::state)) and must not depend on
//! the agent; the agent re-exports it as `bub::agent::TurnState`.

use parking_lot::{Mutex, MutexGuard};
use serde_json::{Map, Value};
use std::any::{Any, TypeId};
use std::collections::HashMap;
use std::sync::Arc;

/// A cheap-to-clone handle on one run's state: JSON values by key, plus typed
/// extensions (one value per Rust type, e.g. the session environment).
#[derive(Clone, Default)]
pub struct TurnState {
    inner: Arc<Mutex<StateInner>>,
}

#[derive(Default)]
struct StateInner {
    values: Map<String, Value>,
    extensions: HashMap<TypeId, Arc<dyn Any + Send + Sync>>,
}

impl TurnState {
    pub fn new() -> TurnState {
        TurnState::default()
    }

    /// A state holding these values.
    pub fn from_values(values: Map<String, Value>) -> TurnState {
        let state = TurnState::new();
        state.lock().values = values;
        state
    }

    fn lock(&self) -> MutexGuard<'_, StateInner> {
        self.inner.lock()
    }

    pub fn get(&self, key: &str) -> Option<Value> {
        self.lock().values.get(key).cloned()
    }

    pub fn get_str(&self, key: &str) -> Option<String> {
        self.get(key).and_then(|v| v.as_str().map(str::to_string))
    }

    pub fn set(&self, key: impl Into<String>, value: Value) {
        self.lock().values.insert(key.into(), value);
    }

    pub fn remove(&self, key: &str) -> Option<Value> {
        self.lock().values.remove(key)
    }

    /// A copy of every JSON value.
    pub fn values(&self) -> Map<String, Value> {
        self.lock().values.clone()
    }

    /// Stores a typed value, replacing any earlier one of the same type.
    pub fn insert_extension<T: Any + Send + Sync>(&self, value: T) {
        self.lock().extensions.insert(TypeId::of::<T>(), Arc::new(value));
    }

    /// The typed value of type `T`, stored first by `make` when there is none
    /// (at once: two calls of one step never replace each other's).
    pub fn extension_or_insert_with<T: Any + Send + Sync>(&self, make: impl FnOnce() -> T) -> Arc<T> {
        let mut inner = self.lock();
        if let Some(value) = inner.extensions.get(&TypeId::of::<T>()).cloned().and_then(|v| v.downcast::<T>().ok()) {
            return value;
        }
        let value = Arc::new(make());
        inner.extensions.insert(TypeId::of::<T>(), value.clone());
        value
    }

    /// Removes the typed value of type `T`, returning it if there was one.
    pub fn remove_extension<T: Any + Send + Sync>(&self) -> Option<Arc<T>> {
        let value = self.lock().extensions.remove(&TypeId::of::<T>())?;
        value.downcast::<T>().ok()
    }

    pub fn extension<T: Any + Send + Sync>(&self) -> Option<Arc<T>> {
        let value = self.lock().extensions.get(&TypeId::of::<T>()).cloned()?;
        value.downcast::<T>().ok()
    }

    /// An independent copy (values and extensions), for a subagent.
    pub fn fork(&self) -> TurnState {
        let inner = self.lock();
        TurnState {
            inner: Arc::new(Mutex::new(StateInner {
                values: inner.values.clone(),
                extensions: inner.extensions.clone(),
            })),
        }
    }
}

impl std::fmt::Debug for TurnState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TurnState").field("values", &self.lock().values).finish_non_exhaustive()
    }
}
