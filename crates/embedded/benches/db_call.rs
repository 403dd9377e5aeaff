//! What one database call costs, apart from the work it does: the pipeline makes about eleven per
//! message, and this says how much of a message's CPU is the calls themselves.
//!
//! Measurements of `DB_CALL_N` calls each (default 20,000), on a fresh WAL database:
//! - **through the database thread** (`Db::call` with `Calls::OnTheThread`): a one-row read and a
//!   one-row insert, awaited one after the other from a multi-threaded runtime;
//! - **`Db::call` as the store and the queue make it** (`Calls::InlineWhenQuiet`): the same two,
//!   from one caller, so that they run on the caller's thread;
//! - **inline**, on the calling thread with its own connection: the same read inside
//!   `BEGIN IMMEDIATE … COMMIT` (what a group costs the database thread), the read in autocommit,
//!   and the insert in its own transaction.
//!
//! The difference between the first and the inline figures is the hand-off between threads. CPU is
//! the process's user + system time (`/proc/self/stat`, 10 ms ticks), so the counts are large (an
//! autocommit read is below one tick over 20,000 calls, and reads 0 or 0.5 µs).
//!
//! `cargo bench -p switchboard-embedded --bench db_call`

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::print_stdout, clippy::cast_precision_loss)]

use std::time::{Duration, Instant};

use switchboard_embedded::db::{Calls, Db};

// Only its CPU clock is used here.
#[allow(dead_code)]
mod support;

fn per_call(cpu: Duration, wall: Duration, n: u32) -> String {
    let us = |d: Duration| d.as_secs_f64() * 1e6 / f64::from(n);
    format!("{:6.1} µs CPU, {:6.1} µs wall per call", us(cpu), us(wall))
}

fn measure(n: u32, mut f: impl FnMut(u32)) -> String {
    let (cpu, wall) = (support::cpu(), Instant::now());
    for i in 0..n {
        f(i);
    }
    per_call(support::cpu() - cpu, wall.elapsed(), n)
}

fn inline(dir: &std::path::Path, n: u32) {
    let c = rusqlite::Connection::open(dir.join("inline.db")).unwrap();
    c.pragma_update(None, "journal_mode", "WAL").unwrap();
    c.pragma_update(None, "synchronous", "NORMAL").unwrap();
    c.execute_batch("CREATE TABLE t (v INTEGER)").unwrap();
    let exec = |sql: &str| c.prepare_cached(sql).unwrap().execute([]).unwrap();
    let read = || c.prepare_cached("SELECT 1").unwrap().query_row([], |r| r.get::<_, i64>(0)).unwrap();
    let line = measure(n, |_| {
        exec("BEGIN IMMEDIATE");
        read();
        exec("COMMIT");
    });
    println!("inline, read in BEGIN IMMEDIATE … COMMIT   {line}");
    let line = measure(n, |_| {
        read();
    });
    println!("inline, read in autocommit                {line}");
    let line = measure(n, |i| {
        exec("BEGIN IMMEDIATE");
        c.prepare_cached("INSERT INTO t VALUES (?1)").unwrap().execute([i]).unwrap();
        exec("COMMIT");
    });
    println!("inline, one-row insert and commit         {line}");
}

fn main() {
    let n = std::env::var("DB_CALL_N").ok().and_then(|v| v.parse().ok()).unwrap_or(20_000_u32);
    let dir = tempfile::tempdir().unwrap();
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build().unwrap();
    runtime.block_on(async {
        for (policy, name) in [(Calls::OnTheThread, "database thread"), (Calls::InlineWhenQuiet, "caller alone   ")] {
            let db = Db::open_with(&dir.path().join(format!("{policy:?}.db")), policy).unwrap();
            db.call(|c| Ok(c.execute_batch("CREATE TABLE t (v INTEGER)")?)).await.unwrap();
            for _ in 0..2 {
                let (cpu, wall) = (support::cpu(), Instant::now());
                for _ in 0..n {
                    db.call(|c| Ok(c.prepare_cached("SELECT 1")?.query_row([], |r| r.get::<_, i64>(0))?))
                        .await
                        .unwrap();
                }
                println!("{name}, read                     {}", per_call(support::cpu() - cpu, wall.elapsed(), n));
                let (cpu, wall) = (support::cpu(), Instant::now());
                for i in 0..n {
                    db.call(move |c| Ok(c.prepare_cached("INSERT INTO t VALUES (?1)")?.execute([i])?)).await.unwrap();
                }
                println!("{name}, one-row insert           {}", per_call(support::cpu() - cpu, wall.elapsed(), n));
            }
        }
    });
    inline(dir.path(), n);
}
