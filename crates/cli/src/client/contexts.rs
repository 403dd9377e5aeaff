//! `switchboard config …`: the contexts of the client's configuration file (where
//! [`crate::shared::contexts`] keeps them): set one, choose the current one, list them (never
//! showing a key), delete one. It calls no API.

use std::io::Read as _;

use anyhow::{Context as _, bail};
use clap::Subcommand;
use serde_json::json;

use super::output::table_of;
use crate::shared::contexts::{self, Context, Contexts};

#[derive(Debug, Subcommand)]
pub enum ConfigCommand {
    /// Create a context, or change the fields given of an existing one.
    SetContext {
        name: String,
        /// Base URL of a `switchboard serve` or an API Gateway stage.
        #[arg(long)]
        endpoint: Option<String>,
        /// Tenant to act on.
        #[arg(long, short = 't')]
        tenant: Option<String>,
        /// Read the API key from standard input (so that it is in no shell history).
        #[arg(long, conflicts_with = "aws_sigv4")]
        api_key_stdin: bool,
        /// Sign with SigV4 for API Gateway instead of sending a key (drops a stored key).
        #[arg(long)]
        aws_sigv4: bool,
        /// Region to sign for with SigV4.
        #[arg(long)]
        region: Option<String>,
        /// Also make it the current context.
        #[arg(long = "use")]
        make_current: bool,
    },
    /// Make a context the current one: commands use it for what their flags leave out.
    UseContext { name: String },
    /// Print the current context's name.
    CurrentContext,
    /// List the contexts (the current one marked `*`; keys are never shown).
    GetContexts,
    /// Delete a context.
    DeleteContext { name: String },
}

/// `switchboard config <verb>`
pub fn run(command: ConfigCommand) -> anyhow::Result<()> {
    let path = contexts::path().context("no configuration file path: set SWITCHBOARD_CONFIG or HOME")?;
    let mut all = contexts::load(&path)?;
    match command {
        ConfigCommand::SetContext { name, endpoint, tenant, api_key_stdin, aws_sigv4, region, make_current } => {
            let context = all.contexts.entry(name.clone()).or_default();
            set(context, endpoint, tenant, region);
            if aws_sigv4 {
                context.aws_sigv4 = true;
                context.api_key = None;
            }
            if api_key_stdin {
                context.api_key = Some(read_key()?);
                context.aws_sigv4 = false;
            }
            if make_current {
                all.current_context = Some(name.clone());
            }
            contexts::save(&path, &all)?;
            println!("context {name} set in {}", path.display());
        }
        ConfigCommand::UseContext { name } => {
            all.chosen(Some(&name))?;
            all.current_context = Some(name.clone());
            contexts::save(&path, &all)?;
            println!("current context: {name}");
        }
        ConfigCommand::CurrentContext => match &all.current_context {
            Some(name) => println!("{name}"),
            None => bail!("no current context (`switchboard config use-context NAME` sets one)"),
        },
        ConfigCommand::GetContexts => println!("{}", listing(&all)),
        ConfigCommand::DeleteContext { name } => {
            if all.contexts.remove(&name).is_none() {
                bail!("no context '{name}' in {}", path.display());
            }
            if all.current_context.as_deref() == Some(name.as_str()) {
                all.current_context = None;
            }
            contexts::save(&path, &all)?;
            println!("deleted context {name}");
        }
    }
    Ok(())
}

fn set(context: &mut Context, endpoint: Option<String>, tenant: Option<String>, region: Option<String>) {
    if endpoint.is_some() {
        context.endpoint = endpoint.map(|e| e.trim_end_matches('/').to_owned());
    }
    if tenant.is_some() {
        context.tenant = tenant;
    }
    if region.is_some() {
        context.region = region;
    }
}

/// The key on standard input: its first line, trimmed.
fn read_key() -> anyhow::Result<String> {
    let mut text = String::new();
    std::io::stdin().take(64 * 1024).read_to_string(&mut text).context("read the API key from standard input")?;
    match text.lines().next().map(str::trim).filter(|k| !k.is_empty()) {
        Some(key) => Ok(key.to_owned()),
        None => bail!("--api-key-stdin: standard input has no key"),
    }
}

/// A table of the contexts: name, current, endpoint, tenant and how it signs in.
fn listing(all: &Contexts) -> String {
    let rows: Vec<_> = all
        .contexts
        .iter()
        .map(|(name, c)| {
            let auth = match (c.aws_sigv4, &c.api_key) {
                (true, _) => "sigv4",
                (false, Some(_)) => "api key",
                (false, None) => "-",
            };
            let current = if all.current_context.as_deref() == Some(name.as_str()) { "*" } else { "" };
            json!({ "current": current, "name": name, "endpoint": c.endpoint, "tenant": c.tenant, "auth": auth })
        })
        .collect();
    let columns =
        [("CURRENT", "current"), ("NAME", "name"), ("ENDPOINT", "endpoint"), ("TENANT", "tenant"), ("AUTH", "auth")];
    table_of(&columns, &rows)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[test]
    fn the_listing_marks_the_current_context_and_never_shows_a_key() {
        let mut all = Contexts::default();
        all.contexts.insert(
            "local".into(),
            Context {
                endpoint: Some("http://127.0.0.1:8080".into()),
                api_key: Some("sb_secret".into()),
                ..Context::default()
            },
        );
        all.contexts
            .insert("prod".into(), Context { aws_sigv4: true, tenant: Some("acme".into()), ..Context::default() });
        all.current_context = Some("prod".into());
        let text = listing(&all);
        assert!(!text.contains("sb_secret"), "{text}");
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines[0].split_whitespace().collect::<Vec<_>>(), ["CURRENT", "NAME", "ENDPOINT", "TENANT", "AUTH"]);
        assert_eq!(
            lines[1].split_whitespace().collect::<Vec<_>>(),
            ["local", "http://127.0.0.1:8080", "-", "api", "key"]
        );
        assert_eq!(lines[2].split_whitespace().collect::<Vec<_>>(), ["*", "prod", "-", "acme", "sigv4"]);
    }
}
