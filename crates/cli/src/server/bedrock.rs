//! Bedrock for `switchboard serve` built with the `aws` feature: the model client made on first
//! use. It does not sign API calls (that is `crate::shared::sigv4`).

use aws_config::BehaviorVersion;

/// Bedrock for `switchboard serve`: the client is made on the first call (the default chain may
/// probe the instance metadata service, which a server that never calls Bedrock should not
/// wait for). Region and credentials come from the default chain; `AWS_ENDPOINT_URL` and
/// `AWS_ENDPOINT_URL_BEDROCK_RUNTIME` are honoured as by every AWS SDK.
#[derive(Debug, Default)]
pub struct LazyBedrock(tokio::sync::OnceCell<switchboard_aws::BedrockModel>);

#[async_trait::async_trait]
impl switchboard_engine::Model for LazyBedrock {
    async fn converse(
        &self,
        request: &switchboard_engine::ModelRequest,
    ) -> Result<switchboard_engine::ModelResponse, switchboard_engine::ModelError> {
        let model = self
            .0
            .get_or_init(|| async {
                let config = aws_config::defaults(BehaviorVersion::latest()).load().await;
                switchboard_aws::BedrockModel::new(switchboard_aws::AwsClients::new(&config).bedrock)
            })
            .await;
        model.converse(request).await
    }
}
