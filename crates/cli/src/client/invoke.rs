//! `switchboard agents invoke` and `triggers run`: run an agent on a conversation now and print what it did, at
//! the end or (`--stream`) as it happens. It does not manage agents.

use anyhow::{Context, bail};
use reqwest::Method;
use serde_json::Value;

use super::api::{Api, problem_message};
use super::output::{Format, cell, event as data_event, print_data};

/// Runs the agent: with `stream`, prints its events as they come; otherwise the outcome and its
/// actions at the end (the API's answer with `-o json|yaml`).
pub async fn run(api: &Api, path: &str, body: &Value, stream: bool, format: Format) -> anyhow::Result<()> {
    if stream {
        return stream_invoke(api, path, body, format).await;
    }
    let (result, _) = api.call(Method::POST, path, Some(body), None).await?;
    if print_data(&result, format)? {
        return Ok(());
    }
    println!(
        "session {} · execution {} · {}",
        cell(&result["sessionId"]),
        cell(&result["executionId"]),
        cell(&result["status"])
    );
    for a in result["actions"].as_array().cloned().unwrap_or_default() {
        println!("{}", action_line(&a));
    }
    Ok(())
}

/// `agents invoke --stream`: prints the turn's events as they come (`contracts/invoke-stream.md`),
/// or each event's JSON on a line of its own (`-o json`) or as a YAML document (`-o yaml`).
/// Fails on an `error` event.
async fn stream_invoke(api: &Api, path: &str, body: &Value, format: Format) -> anyhow::Result<()> {
    use std::io::Write;
    use switchboard_models::sse::SseReader;

    let mut res = api.send(Method::POST, path, Some(body), &[("accept", "text/event-stream")]).await?;
    let status = res.status();
    if !status.is_success() {
        let text = res.text().await?;
        let value = serde_json::from_str(&text).unwrap_or(Value::String(text));
        bail!("{}", problem_message(status, &value));
    }
    let mut reader = SseReader::default();
    let mut out = std::io::stdout().lock();
    // Whether the line under way holds streamed text (ended before the next line).
    let mut in_text = false;
    while let Some(chunk) = res.chunk().await.context("the stream broke off")? {
        for event in reader.push(&chunk).map_err(|why| anyhow::anyhow!("the stream holds {why}"))? {
            let data: Value = serde_json::from_str(&event.data).unwrap_or(Value::String(event.data.clone()));
            if let Some(text) = data_event(&data, format)? {
                writeln!(out, "{}", text.trim_end_matches('\n'))?;
            } else {
                if in_text && event.event != "text.delta" {
                    writeln!(out)?;
                    in_text = false;
                }
                match event.event.as_str() {
                    "text.delta" => {
                        if !in_text {
                            write!(out, "  … ")?;
                            in_text = true;
                        }
                        write!(out, "{}", data["text"].as_str().unwrap_or_default())?;
                    }
                    name => {
                        if let Some(line) = describe_event(name, &data) {
                            writeln!(out, "{line}")?;
                        }
                    }
                }
            }
            out.flush()?;
            match event.event.as_str() {
                "error" => bail!("{}", data["problem"]["detail"].as_str().unwrap_or("the invoke failed")),
                "execution.finished" | "execution.pending" => return Ok(()),
                _ => {}
            }
        }
    }
    bail!("the stream ended before the execution did; look it up with `executions` by its source")
}

/// One line for an action of a turn, its reply or reason whole: it is what the turn did.
fn action_line(a: &Value) -> String {
    let what = a.get("text").or_else(|| a.get("reason")).and_then(Value::as_str).unwrap_or("-");
    format!("  → {} {what}", cell(&a["type"]))
}

/// One line for a streamed invoke's event (none for the ones not worth a line).
fn describe_event(name: &str, data: &Value) -> Option<String> {
    Some(match name {
        "execution.started" => {
            format!("execution {} · session {}", cell(&data["executionId"]), cell(&data["sessionId"]))
        }
        "model.started" => format!("  model {} …", cell(&data["model"])),
        "model.finished" => format!(
            "  model {} · {} in / {} out tokens · {} ms · {}",
            cell(&data["model"]),
            cell(&data["usage"]["inputTokens"]),
            cell(&data["usage"]["outputTokens"]),
            cell(&data["latencyMs"]),
            cell(&data["stopReason"])
        ),
        "model.retried" => format!("  model {} failed, retrying: {}", cell(&data["model"]), cell(&data["error"])),
        "model.failed" => format!("  model {} failed: {}", cell(&data["model"]), cell(&data["error"])),
        "tool.started" => format!("  tool {} …", cell(&data["name"])),
        "tool.finished" => format!(
            "  tool {} · {} · {} ms",
            cell(&data["name"]),
            if data["isError"] == true { "error" } else { "ok" },
            cell(&data["latencyMs"])
        ),
        "action" => action_line(&data["action"]),
        "execution.finished" => {
            let e = &data["execution"];
            format!(
                "session {} · execution {} · {}",
                cell(&e["sessionId"]),
                cell(&e["executionId"]),
                cell(&e["status"])
            )
        }
        "execution.pending" => format!("still running; the execution will be at {}", cell(&data["location"])),
        _ => return None,
    })
}
