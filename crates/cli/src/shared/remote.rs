//! Where an API is and as whom to call it: the flags the client's commands and the console
//! share. It only holds them; calling is the client's and the console's own business.

use clap::Args;

/// Where and as whom to call.
#[derive(Debug, Args)]
pub struct Remote {
    /// Base URL of a `switchboard serve`, or of an API Gateway stage with --aws-sigv4.
    #[arg(long, env = "SWITCHBOARD_ENDPOINT", default_value = "http://127.0.0.1:8080", global = true)]
    pub endpoint: String,
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
    /// Print the API's JSON instead of a table.
    #[arg(long, global = true)]
    pub json: bool,
}
