//! Where an API is and as whom to call it: the flags the client's commands and the console
//! share, filled in from a context of the configuration file (`switchboard config`) where a flag
//! and its environment variable are both absent. Calling is the client's and the console's own
//! business.

use clap::Args;

use super::contexts::{Context, Contexts};

/// The endpoint when neither a flag, the environment nor a context names one.
pub const DEFAULT_ENDPOINT: &str = "http://127.0.0.1:8080";

/// How the client prints an answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    /// A table of the main columns (a record: its JSON).
    Table,
    /// A table with more columns.
    Wide,
    /// The API's JSON (streams: one JSON object per line).
    Json,
    /// The API's answer as YAML (streams: one YAML document per event).
    Yaml,
}

/// Where and as whom to call.
#[derive(Debug, Args)]
pub struct Remote {
    /// Base URL of a `switchboard serve`, or of an API Gateway stage with --aws-sigv4
    /// (default: the context's, then http://127.0.0.1:8080).
    #[arg(long, env = "SWITCHBOARD_ENDPOINT", global = true)]
    pub endpoint: Option<String>,
    /// API key (an admin key or the tenant's key).
    #[arg(long, env = "SWITCHBOARD_API_KEY", hide_env_values = true, global = true)]
    pub api_key: Option<String>,
    /// Sign requests with SigV4 for API Gateway (`AWS_IAM` auth) instead of sending an API key;
    /// credentials from the default AWS chain.
    #[arg(
        long,
        env = "SWITCHBOARD_AWS_SIGV4",
        global = true,
        value_parser = clap::builder::BoolishValueParser::new()
    )]
    pub aws_sigv4: bool,
    /// Region to sign for with --aws-sigv4 (default: AWS_REGION, then the AWS profile's).
    #[arg(long, global = true)]
    #[cfg_attr(not(feature = "aws"), allow(dead_code))]
    pub region: Option<String>,
    /// Tenant to act on.
    #[arg(long, short = 't', env = "SWITCHBOARD_TENANT", global = true)]
    pub tenant: Option<String>,
    /// The context of the configuration file to use for this command instead of its current one.
    #[arg(long, env = "SWITCHBOARD_CONTEXT", global = true)]
    pub context: Option<String>,
    /// How to print answers: table, wide, json or yaml.
    #[arg(long, short = 'o', value_enum, global = true, value_name = "FORMAT")]
    pub output: Option<Format>,
    /// Print the API's JSON (the same as `-o json`).
    #[arg(long, global = true, conflicts_with = "output")]
    pub json: bool,
}

impl Remote {
    /// The base URL to call.
    pub fn endpoint(&self) -> &str {
        self.endpoint.as_deref().unwrap_or(DEFAULT_ENDPOINT).trim_end_matches('/')
    }

    /// How to print answers.
    pub fn format(&self) -> Format {
        if self.json { Format::Json } else { self.output.unwrap_or(Format::Table) }
    }

    /// Fills what the command line and the environment left out from the context `--context`
    /// names, or else the configuration file's current one. No file, no current context: nothing
    /// changes. A named context that does not exist is an error.
    pub fn fill_from(&mut self, contexts: &Contexts) -> anyhow::Result<()> {
        let Some((_, context)) = contexts.chosen(self.context.as_deref())? else {
            return Ok(());
        };
        let Context { endpoint, tenant, api_key, aws_sigv4, region } = context.clone();
        self.endpoint = self.endpoint.take().or(endpoint);
        self.tenant = self.tenant.take().or(tenant);
        self.region = self.region.take().or(region);
        // A key given on the command line or in the environment wins over a context that signs.
        if self.api_key.is_none() {
            self.aws_sigv4 |= aws_sigv4;
        }
        if !self.aws_sigv4 {
            self.api_key = self.api_key.take().or(api_key);
        }
        Ok(())
    }
}
