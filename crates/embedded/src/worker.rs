//! TEMPORARY compile placeholder; replaced by the real worker pool.
#![allow(dead_code, unused_variables)]
use std::sync::Arc;
use std::time::Duration;
use async_trait::async_trait;
use crate::queue::{Delivery, SqliteWorkQueue};
#[derive(Debug, Clone, PartialEq, Eq)] pub struct ItemFailure { pub message: String, pub retry_after: Option<Duration> }
#[async_trait] pub trait ItemHandler: Send + Sync + 'static { async fn handle(&self, delivery: &Delivery) -> Result<(), ItemFailure>; }
#[derive(Debug)] pub struct WorkerPool;
impl WorkerPool { pub fn start(q: SqliteWorkQueue, h: Arc<dyn ItemHandler>, w: usize, p: Duration) -> Self { Self } pub async fn shutdown(self) {} }
