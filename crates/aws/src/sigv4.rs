//! SigV4 for HTTP requests made outside the SDK (API Gateway's `execute-api`): given the request
//! exactly as it will be sent, the headers that sign it. It sends nothing; credentials are passed
//! in, so a signature is a pure function of its inputs ([`resolve_credentials`] fetches a set
//! from an SDK config for callers that sign several requests with one).

use std::time::SystemTime;

use aws_config::SdkConfig;
use aws_credential_types::provider::ProvideCredentials;
use aws_sigv4::http_request::{SignableBody, SignableRequest, SigningSettings, sign as sign_v4};
use aws_sigv4::sign::v4;

pub use aws_credential_types::Credentials;

/// The SigV4 service name of API Gateway.
pub const EXECUTE_API: &str = "execute-api";

/// A request about to be sent. Everything here is what goes on the wire.
#[derive(Debug, Clone, Copy)]
pub struct UnsignedRequest<'a> {
    pub method: &'a str,
    /// The full URL, query string included, as it will be sent. A `+` in the query is read as a
    /// space (form encoding), so a literal plus must be sent as `%2B`.
    pub url: &'a str,
    /// Headers to sign, each also sent. `host` is added from the URL when missing.
    pub headers: &'a [(&'a str, &'a str)],
    pub body: &'a [u8],
}

/// Why a request could not be signed: a URL without a host, or a header or parameter the
/// signer refuses. Never retryable: the same input fails the same way.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("cannot sign the request: {0}")]
pub struct SigningError(String);

/// No credentials: `config` has no provider, or no provider of its chain found any.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct NoCredentials(String);

/// The credentials `config`'s provider gives now. The error says why with every cause (for the
/// default chain: each source tried and why it had none).
pub async fn resolve_credentials(config: &SdkConfig) -> Result<Credentials, NoCredentials> {
    let provider = config.credentials_provider().ok_or_else(|| NoCredentials("no credentials provider".into()))?;
    provider.provide_credentials().await.map_err(|e| {
        let mut message = e.to_string();
        let mut cause = std::error::Error::source(&e);
        while let Some(c) = cause {
            message.push_str(&format!(": {c}"));
            cause = c.source();
        }
        NoCredentials(message)
    })
}

/// The headers to add to `request` to sign it for `service` in `region` at `time`: `host` when
/// the caller did not give one (taken from the URL, as an HTTP client sends it, so that the
/// signed and the sent host are the same string), `authorization`, `x-amz-date`, and
/// `x-amz-security-token` with temporary credentials. The body is hashed into the signature;
/// no `x-amz-content-sha256` header is added (API Gateway does not need one).
pub fn sign(
    request: UnsignedRequest<'_>,
    credentials: &Credentials,
    region: &str,
    service: &str,
    time: SystemTime,
) -> Result<Vec<(String, String)>, SigningError> {
    let has_host = request.headers.iter().any(|(name, _)| name.eq_ignore_ascii_case("host"));
    let host = if has_host { None } else { Some(host_header(request.url)?) };
    let headers = request.headers.iter().copied().chain(host.as_deref().map(|h| ("host", h)));
    let identity = credentials.clone().into();
    let params = v4::SigningParams::builder()
        .identity(&identity)
        .region(region)
        .name(service)
        .time(time)
        // The defaults encode the path twice and normalise it: the rules of every service but S3.
        .settings(SigningSettings::default())
        .build()
        .map_err(|e| SigningError(format!("signing parameters: {e}")))?
        .into();
    let signable = SignableRequest::new(request.method, request.url, headers, SignableBody::Bytes(request.body))
        .map_err(|e| SigningError(e.to_string()))?;
    let (instructions, _) = sign_v4(signable, &params).map_err(|e| SigningError(e.to_string()))?.into_parts();
    let mut out: Vec<(String, String)> = host.map(|h| ("host".to_owned(), h)).into_iter().collect();
    out.extend(instructions.headers().map(|(k, v)| (k.to_owned(), v.to_owned())));
    Ok(out)
}

/// `host` or `host:port` as an HTTP/1.1 client sends it: the port only when it is not the
/// scheme's default.
fn host_header(url: &str) -> Result<String, SigningError> {
    let url = url::Url::parse(url).map_err(|e| SigningError(format!("URL {url}: {e}")))?;
    let host = url.host_str().ok_or_else(|| SigningError(format!("URL {url} has no host")))?;
    Ok(match url.port() {
        Some(port) => format!("{host}:{port}"),
        None => host.to_owned(),
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

    use std::time::{Duration, UNIX_EPOCH};

    use super::*;

    // The AWS SigV4 test suite: its example credentials, region, service and time
    // (2015-08-30T12:36:00Z). Expected signatures are the suite's, not computed here.
    fn suite_credentials(token: Option<&str>) -> Credentials {
        Credentials::new(
            "AKIDEXAMPLE",
            "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY",
            token.map(str::to_owned),
            None,
            "suite",
        )
    }

    fn suite_time() -> SystemTime {
        UNIX_EPOCH + Duration::from_secs(1_440_938_160)
    }

    fn signed(request: UnsignedRequest<'_>, token: Option<&str>) -> Vec<(String, String)> {
        sign(request, &suite_credentials(token), "us-east-1", "service", suite_time()).unwrap()
    }

    fn header<'a>(headers: &'a [(String, String)], name: &str) -> Option<&'a str> {
        headers.iter().find(|(k, _)| k == name).map(|(_, v)| v.as_str())
    }

    fn authorization(signed_headers: &str, signature: &str) -> String {
        format!(
            "AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/20150830/us-east-1/service/aws4_request, \
             SignedHeaders={signed_headers}, Signature={signature}"
        )
    }

    #[test]
    fn it_signs_the_get_vanilla_vector() {
        // given the suite's `get-vanilla` request, with no host header
        let request = UnsignedRequest { method: "GET", url: "https://example.amazonaws.com/", headers: &[], body: b"" };

        // when it is signed
        let headers = signed(request, None);

        // then the host comes from the URL and the signature is the suite's
        assert_eq!(header(&headers, "host"), Some("example.amazonaws.com"));
        assert_eq!(header(&headers, "x-amz-date"), Some("20150830T123600Z"));
        assert_eq!(
            header(&headers, "authorization").unwrap(),
            authorization("host;x-amz-date", "5fa00fa31553b73ebf1942676e86291e8372ff2a2260956d9b8aae1d763fbf31")
        );
        assert_eq!(header(&headers, "x-amz-security-token"), None);
    }

    #[test]
    fn it_signs_the_query_sorted_as_in_the_get_vanilla_query_order_key_case_vector() {
        let request = UnsignedRequest {
            method: "GET",
            url: "https://example.amazonaws.com/?Param2=value2&Param1=value1",
            headers: &[("host", "example.amazonaws.com")],
            body: b"",
        };

        let headers = signed(request, None);

        // a host the caller gave is not returned again
        assert_eq!(header(&headers, "host"), None);
        assert_eq!(
            header(&headers, "authorization").unwrap(),
            authorization("host;x-amz-date", "b97d918cfa904a5beff61c982a1b6f458b799221646efd99d3219ec94cdf2500")
        );
    }

    #[test]
    fn it_signs_and_returns_the_session_token_as_in_the_get_vanilla_with_session_token_vector() {
        let token = "6e86291e8372ff2a2260956d9b8aae1d763fbf315fa00fa31553b73ebf194267";
        let request = UnsignedRequest { method: "GET", url: "https://example.amazonaws.com/", headers: &[], body: b"" };

        let headers = signed(request, Some(token));

        assert_eq!(header(&headers, "x-amz-security-token"), Some(token));
        assert_eq!(
            header(&headers, "authorization").unwrap(),
            authorization(
                "host;x-amz-date;x-amz-security-token",
                "07ec1639c89043aa0e3e2de82b96708f198cceab042d4a97044c66dd9f74e7f8"
            )
        );
    }

    #[test]
    fn it_hashes_the_body_as_in_the_post_x_www_form_urlencoded_vector() {
        // the 2015 suite's `post-x-www-form-urlencoded` (content-type signed, no content-sha256
        // header); the newer suite's version of it also signs x-amz-content-sha256
        let request = UnsignedRequest {
            method: "POST",
            url: "https://example.amazonaws.com/",
            headers: &[("content-type", "application/x-www-form-urlencoded"), ("host", "example.amazonaws.com")],
            body: b"Param1=value1",
        };

        let headers = signed(request, None);

        assert_eq!(
            header(&headers, "authorization").unwrap(),
            authorization(
                "content-type;host;x-amz-date",
                "ff11897932ad3f4e8b18135d722051e5ac45fc38421b1da7b9d196a0fe09473a"
            )
        );
    }

    #[test]
    fn the_signed_host_keeps_a_port_that_is_not_the_default() {
        let request = UnsignedRequest { method: "GET", url: "http://127.0.0.1:8443/prod/x", headers: &[], body: b"" };
        assert_eq!(header(&signed(request, None), "host"), Some("127.0.0.1:8443"));
        let request = UnsignedRequest { method: "GET", url: "https://h.example:443/x", headers: &[], body: b"" };
        assert_eq!(header(&signed(request, None), "host"), Some("h.example"));
    }

    #[test]
    fn a_url_without_a_host_is_an_error_not_a_panic() {
        let request = UnsignedRequest { method: "GET", url: "not a url", headers: &[], body: b"" };
        let err = sign(request, &suite_credentials(None), "us-east-1", "service", suite_time()).unwrap_err();
        assert!(err.to_string().contains("cannot sign"), "{err}");
    }
}
