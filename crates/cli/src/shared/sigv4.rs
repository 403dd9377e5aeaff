//! `--aws-sigv4`: the internal API behind API Gateway with `AWS_IAM` auth. Each request is
//! signed for `execute-api` with credentials from the default AWS chain (environment, shared
//! profiles, SSO, `credential_process`, container or instance role), resolved once per run. It
//! never writes credentials anywhere.

use std::time::SystemTime;

use anyhow::Context;
use aws_config::{BehaviorVersion, Region};
use switchboard_aws::sigv4::{self, Credentials, EXECUTE_API, UnsignedRequest};

/// One set of credentials and the region they sign for.
#[derive(Debug)]
pub struct Signer {
    credentials: Credentials,
    region: String,
}

impl Signer {
    /// Resolves the region (`region`, else `AWS_REGION`, else the profile's) and the
    /// credentials of the default chain.
    pub async fn from_default_chain(region: Option<&str>) -> anyhow::Result<Self> {
        let mut loader = aws_config::defaults(BehaviorVersion::latest());
        if let Some(r) = region {
            loader = loader.region(Region::new(r.to_owned()));
        }
        let config = loader.load().await;
        let region = config
            .region()
            .map(ToString::to_string)
            .context("--aws-sigv4 needs a region: pass --region, or set AWS_REGION or a region in the AWS profile")?;
        let credentials = sigv4::resolve_credentials(&config).await.context(
            "--aws-sigv4 found no AWS credentials (environment, AWS_PROFILE and ~/.aws files, SSO, \
             container or instance role)",
        )?;
        Ok(Self { credentials, region })
    }

    /// The headers that sign this request (`headers` are sent too; `host` is among the result).
    pub fn sign(
        &self,
        method: &str,
        url: &str,
        headers: &[(&str, &str)],
        body: &[u8],
    ) -> anyhow::Result<Vec<(String, String)>> {
        let request = UnsignedRequest { method, url, headers, body };
        Ok(sigv4::sign(request, &self.credentials, &self.region, EXECUTE_API, SystemTime::now())?)
    }
}
