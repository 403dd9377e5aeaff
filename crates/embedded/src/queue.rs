//! TEMPORARY compile placeholder; replaced by the real queue.
#![allow(dead_code, unused_variables)]
use std::sync::Arc;
use std::time::Duration;
use async_trait::async_trait;
use chrono::{DateTime, Utc};
use switchboard_engine::{Clock, Enqueued, QueueError, WorkItem, WorkQueue};
use crate::db::Db;
pub const SCHEMA: &str = "";
#[derive(Debug, Clone)] pub struct QueueConfig { pub visibility_timeout: Duration, pub max_receives: u32, pub dedup_window: Duration }
impl Default for QueueConfig { fn default() -> Self { Self { visibility_timeout: Duration::from_secs(30), max_receives: 5, dedup_window: Duration::from_secs(300) } } }
#[derive(Debug, Clone, PartialEq)] pub struct Delivery { pub receipt: String, pub group_id: String, pub dedup_id: String, pub body: String, pub receive_count: u32, pub enqueued_at: DateTime<Utc> }
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)] pub struct QueueStats { pub ready: u64, pub in_flight: u64, pub delayed: u64, pub dead: u64 }
#[derive(Debug, Clone)] pub struct SqliteWorkQueue { db: Db, clock: Arc<dyn Clock>, config: QueueConfig }
fn no() -> QueueError { QueueError { message: "placeholder".into(), retryable: false } }
impl SqliteWorkQueue {
    pub fn new(db: Db, clock: Arc<dyn Clock>, config: QueueConfig) -> Self { Self { db, clock, config } }
    pub async fn enqueue_raw(&self, g: &str, d: &str, b: &str) -> Result<Enqueued, QueueError> { Err(no()) }
    pub async fn receive(&self) -> Result<Option<Delivery>, QueueError> { Err(no()) }
    pub async fn ack(&self, r: &str) -> Result<bool, QueueError> { Err(no()) }
    pub async fn release(&self, r: &str, d: Duration) -> Result<bool, QueueError> { Err(no()) }
    pub async fn stats(&self) -> Result<QueueStats, QueueError> { Err(no()) }
    pub fn wake(&self) {}
    pub async fn wait_idle(&self) -> Result<(), QueueError> { Err(no()) }
}
#[async_trait] impl WorkQueue for SqliteWorkQueue { async fn enqueue(&self, item: &WorkItem, d: &str) -> Result<Enqueued, QueueError> { Err(no()) } }
