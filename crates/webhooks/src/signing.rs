//! The signature headers of one attempt, in the scheme the tool chose (`contracts/webhooks.md`).
//! It neither reads secrets (the cache does) nor sends anything.

use reqwest::header::{HeaderMap, HeaderValue};
use switchboard_domain::SignatureScheme;
use switchboard_domain::webhook::{self, standard};
use switchboard_engine::ports::WebhookError;

use crate::secrets::SecretValue;

/// How every attempt of one call is signed: the tool's scheme with its key, read once per call.
pub(crate) enum Signer {
    /// `Switchboard-Timestamp`, and `Switchboard-Signature` when the tool has a secret.
    Switchboard(Option<SecretValue>),
    /// `webhook-id` and `webhook-timestamp`, and `webhook-signature` when the tool has a secret.
    Standard(Option<standard::Key>),
}

impl Signer {
    /// The signer of `scheme` with the tool's secret `name` (when it has one) read as `secret`.
    /// A Standard Webhooks tool whose secret is not a `whsec_` secret is a secret error: known
    /// only now, since the secret is not read when the tool is written.
    pub(crate) fn new(scheme: SignatureScheme, secret: Option<(&str, SecretValue)>) -> Result<Self, WebhookError> {
        match scheme {
            SignatureScheme::Switchboard => Ok(Self::Switchboard(secret.map(|(_, value)| value))),
            SignatureScheme::StandardWebhooks => {
                let key = secret
                    .map(|(name, value)| {
                        let text = std::str::from_utf8(value.expose()).unwrap_or_default();
                        standard::Key::from_secret(text).map_err(|e| {
                            WebhookError::Secret(format!(
                                "secret '{name}' is not a Standard Webhooks secret ('whsec_' and base64): {e}"
                            ))
                        })
                    })
                    .transpose()?;
                Ok(Self::Standard(key))
            }
        }
    }

    /// Adds this attempt's headers for `body`, sent as message `id` (the idempotency key) and
    /// signed at `timestamp`.
    pub(crate) fn stamp(&self, headers: &mut HeaderMap, id: &str, timestamp: i64, body: &[u8]) -> Result<(), String> {
        let signature = match self {
            Self::Switchboard(secret) => {
                headers.insert(webhook::TIMESTAMP_HEADER, HeaderValue::from(timestamp));
                secret.as_ref().map(|s| (webhook::SIGNATURE_HEADER, webhook::sign(s.expose(), timestamp, body)))
            }
            Self::Standard(key) => {
                let message_id =
                    HeaderValue::from_str(id).map_err(|_| "the idempotency key is not a valid header value")?;
                headers.insert(standard::ID_HEADER, message_id);
                headers.insert(standard::TIMESTAMP_HEADER, HeaderValue::from(timestamp));
                key.as_ref().map(|k| (standard::SIGNATURE_HEADER, standard::sign(k, id, timestamp, body)))
            }
        };
        if let Some((name, value)) = signature {
            let mut value = HeaderValue::from_str(&value).map_err(|_| "cannot encode the signature")?;
            value.set_sensitive(true);
            headers.insert(name, value);
        }
        Ok(())
    }
}
