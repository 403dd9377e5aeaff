//! Model references: which provider answers an agent, and with which of its models.
//!
//! A reference is `provider:model` (`openai:gpt-4o-mini`, `anthropic:claude-3-5-haiku-latest`,
//! `ollama:llama3.1`, `bedrock:amazon.nova-lite-v1:0`) or a plain id, which is an alias when one
//! is configured and otherwise a Bedrock model id (the product brief's shape). A Bedrock id may
//! itself hold colons (`anthropic.claude-3-5-haiku-20241022-v1:0`, inference-profile ARNs): only a
//! first segment of lowercase letters, digits and `-` (no dot) before the first colon names a
//! provider, and `arn` never does.

use std::fmt;

/// The model providers Switchboard has an adapter for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Provider {
    /// Amazon Bedrock, through the Converse API.
    Bedrock,
    /// Any OpenAI-compatible Chat Completions endpoint.
    OpenAi,
    /// The Anthropic Messages API.
    Anthropic,
    /// A local Ollama server, through its OpenAI-compatible endpoint.
    Ollama,
    /// The scripted test double (not an AI).
    Scripted,
}

impl Provider {
    pub const ALL: [Provider; 5] =
        [Provider::Bedrock, Provider::OpenAi, Provider::Anthropic, Provider::Ollama, Provider::Scripted];

    pub fn as_str(self) -> &'static str {
        match self {
            Provider::Bedrock => "bedrock",
            Provider::OpenAi => "openai",
            Provider::Anthropic => "anthropic",
            Provider::Ollama => "ollama",
            Provider::Scripted => "scripted",
        }
    }

    pub fn parse(name: &str) -> Option<Provider> {
        Provider::ALL.into_iter().find(|p| p.as_str() == name)
    }
}

impl fmt::Display for Provider {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A parsed model reference.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ModelRef<'a> {
    /// `provider:model`.
    Qualified { provider: Provider, model: &'a str },
    /// A plain id: an alias if one is configured, else a Bedrock model id.
    Plain(&'a str),
}

/// The longest model reference accepted.
pub const MAX_MODEL_REF_LEN: usize = 256;

impl<'a> ModelRef<'a> {
    /// Parses `reference`; the error says what is wrong in a sentence that fits after the field's
    /// name.
    pub fn parse(reference: &'a str) -> Result<ModelRef<'a>, String> {
        if reference.trim().is_empty() || reference.len() > MAX_MODEL_REF_LEN {
            return Err(format!("must be a model reference of 1 to {MAX_MODEL_REF_LEN} characters"));
        }
        if reference.trim() != reference || reference.chars().any(char::is_control) {
            return Err("must not hold spaces at its ends or control characters".into());
        }
        let Some((prefix, rest)) = reference.split_once(':') else {
            return Ok(ModelRef::Plain(reference));
        };
        let names_provider = prefix != "arn"
            && !prefix.is_empty()
            && prefix.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-');
        if !names_provider {
            return Ok(ModelRef::Plain(reference));
        }
        let Some(provider) = Provider::parse(prefix) else {
            let known = Provider::ALL.map(Provider::as_str).join(", ");
            return Err(format!("names an unknown provider `{prefix}` (known: {known})"));
        };
        if rest.is_empty() {
            return Err(format!("must name a model after `{prefix}:`"));
        }
        Ok(ModelRef::Qualified { provider, model: rest })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn qualified_plain_and_bedrock_ids_with_colons() {
        assert_eq!(
            ModelRef::parse("openai:gpt-4o-mini"),
            Ok(ModelRef::Qualified { provider: Provider::OpenAi, model: "gpt-4o-mini" })
        );
        assert_eq!(
            ModelRef::parse("bedrock:anthropic.claude-3-5-haiku-20241022-v1:0"),
            Ok(ModelRef::Qualified { provider: Provider::Bedrock, model: "anthropic.claude-3-5-haiku-20241022-v1:0" })
        );
        assert_eq!(
            ModelRef::parse("ollama:llama3.1:8b"),
            Ok(ModelRef::Qualified { provider: Provider::Ollama, model: "llama3.1:8b" })
        );
        for plain in [
            "anthropic.claude-3-5-haiku-20241022-v1:0",
            "us.anthropic.claude-3-5-haiku-20241022-v1:0",
            "arn:aws:bedrock:us-east-1:123456789012:inference-profile/x",
            "anthropic.claude-3-sonnet",
            "fast",
            "Weird:Case",
        ] {
            assert_eq!(ModelRef::parse(plain), Ok(ModelRef::Plain(plain)), "{plain}");
        }
    }

    #[test]
    fn unknown_providers_and_empty_models_are_refused() {
        let e = ModelRef::parse("gemini:pro").unwrap_err();
        assert!(e.contains("unknown provider `gemini`") && e.contains("openai"), "{e}");
        assert!(ModelRef::parse("openai:").unwrap_err().contains("after `openai:`"));
        assert!(ModelRef::parse("").is_err());
        assert!(ModelRef::parse(" openai:x").is_err());
        assert!(ModelRef::parse(&"m".repeat(257)).is_err());
    }
}
