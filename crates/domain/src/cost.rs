//! What model calls cost: the tokens a call used, a versioned price table (US dollars per
//! million tokens) and the cost of one call. What executions add up to is `usage`.
//!
//! Costs are kept in billionths of a dollar, so that sums over millions of calls are exact; JSON
//! shows dollars. A model the table does not know costs `null`, never 0: a report must not claim
//! that an unpriced model was free.

use std::collections::BTreeMap;

use chrono::NaiveDate;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// An amount in US dollars, held as nano-dollars; serialised as a dollar number.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord)]
pub struct Cost {
    pub nanos: u64,
}

impl Cost {
    pub const ZERO: Cost = Cost { nanos: 0 };

    pub fn from_nanos(nanos: u64) -> Self {
        Self { nanos }
    }

    pub fn dollars(self) -> f64 {
        self.nanos as f64 / 1e9
    }

    pub fn saturating_add(self, other: Cost) -> Cost {
        Cost { nanos: self.nanos.saturating_add(other.nanos) }
    }
}

impl Serialize for Cost {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_f64(self.dollars())
    }
}

impl<'de> Deserialize<'de> for Cost {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let dollars = f64::deserialize(d)?;
        if !dollars.is_finite() || dollars < 0.0 {
            return Err(serde::de::Error::custom("a cost is a non-negative number of dollars"));
        }
        Ok(Cost { nanos: (dollars * 1e9).round() as u64 })
    }
}

/// One model's prices, in dollars per million tokens.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Price {
    pub input: f64,
    pub output: f64,
    /// Absent: the provider has no cache-read price (a call that read from a cache costs `None`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache_read: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache_write: Option<f64>,
}

impl Price {
    /// What `usage` costs at these prices; `None` when it used tokens this price does not cover.
    pub fn cost(&self, usage: &TokenUsage) -> Option<Cost> {
        let part = |tokens: u64, per_million: Option<f64>| match (tokens, per_million) {
            (0, _) => Some(0.0),
            (_, None) => None,
            // Dollars per million tokens = nano-dollars per thousandth of a token.
            (n, Some(p)) => Some(n as f64 * p * 1000.0),
        };
        let nanos = part(usage.input_tokens, Some(self.input))?
            + part(usage.output_tokens, Some(self.output))?
            + part(usage.cache_read_tokens, self.cache_read)?
            + part(usage.cache_write_tokens, self.cache_write)?;
        Some(Cost { nanos: nanos.round() as u64 })
    }

    fn check(&self) -> Result<(), String> {
        let all = [Some(self.input), Some(self.output), self.cache_read, self.cache_write];
        if all.into_iter().flatten().all(|p| p.is_finite() && (0.0..=100_000.0).contains(&p)) {
            Ok(())
        } else {
            Err("prices are dollars per million tokens, between 0 and 100000".into())
        }
    }
}

/// Prices by model reference (`provider:model`), with the version they were taken at.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PriceTable {
    pub version: String,
    #[serde(default, skip_serializing)]
    pub note: String,
    pub models: BTreeMap<String, Price>,
}

impl Default for PriceTable {
    /// The shipped table.
    fn default() -> Self {
        Self::builtin()
    }
}

/// Bedrock's cross-region inference profiles (`us.anthropic…`) cost what their model costs.
const INFERENCE_PROFILE_PREFIXES: &[&str] = &["us.", "eu.", "apac.", "global.", "us-gov.", "jp.", "au.", "ca."];

impl PriceTable {
    /// The table this release ships with (`crates/domain/prices.json`).
    pub fn builtin() -> Self {
        // The file is checked by a unit test, so it always parses.
        serde_json::from_str(include_str!("../prices.json")).unwrap_or_else(|_| PriceTable::empty())
    }

    /// A table that prices nothing.
    pub fn empty() -> Self {
        PriceTable { version: "none".into(), note: String::new(), models: BTreeMap::new() }
    }

    /// Adds or replaces `models`; the table's version becomes `version`.
    pub fn merge(&mut self, version: String, models: BTreeMap<String, Price>) -> Result<(), String> {
        for (model, price) in &models {
            price.check().map_err(|e| format!("prices.{model}: {e}"))?;
            if !model.contains(':') {
                return Err(format!("prices.{model}: name the model as provider:model"));
            }
        }
        self.version = version;
        self.models.extend(models);
        Ok(())
    }

    /// The price of `model` as a call record names it (`provider:id`): the exact entry, else the
    /// id without a dated-snapshot suffix (`gpt-4o-mini-2024-07-18`), else without a Bedrock
    /// inference-profile prefix (`us.`), else the provider's `provider:*` entry.
    pub fn price(&self, model: &str) -> Option<&Price> {
        if let Some(p) = self.models.get(model) {
            return Some(p);
        }
        // A plain id is a Bedrock model id (the brief's shape), colons and all.
        let (provider, id) = match crate::ModelRef::parse(model).ok()? {
            crate::ModelRef::Qualified { provider, model } => (provider.as_str(), model),
            crate::ModelRef::Plain(id) => ("bedrock", id),
        };
        if let Some(p) = self.models.get(&format!("{provider}:{id}")) {
            return Some(p);
        }
        if let Some(undated) = without_date(id)
            && let Some(p) = self.models.get(&format!("{provider}:{undated}"))
        {
            return Some(p);
        }
        if provider == "bedrock"
            && let Some(base) = INFERENCE_PROFILE_PREFIXES.iter().find_map(|p| id.strip_prefix(p))
            && let Some(p) = self.models.get(&format!("bedrock:{base}"))
        {
            return Some(p);
        }
        self.models.get(&format!("{provider}:*"))
    }

    /// What one call of `model` with `usage` cost; `None` when the table cannot say.
    pub fn cost(&self, model: &str, usage: &TokenUsage) -> Option<Cost> {
        self.price(model)?.cost(usage)
    }
}

/// `gpt-4o-2024-08-06` → `gpt-4o`.
fn without_date(id: &str) -> Option<&str> {
    let (head, date) = id.split_at_checked(id.len().checked_sub(11)?)?;
    let date = date.strip_prefix('-')?;
    NaiveDate::parse_from_str(date, "%Y-%m-%d").ok().map(|_| head)
}

/// The tokens one model call (or an execution, added up) used.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TokenUsage {
    /// Input tokens read fresh (not from the provider's prompt cache).
    pub input_tokens: u64,
    pub output_tokens: u64,
    /// Input tokens read from the provider's prompt cache (cheaper). Omitted when 0.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub cache_read_tokens: u64,
    /// Input tokens written to the provider's prompt cache (dearer). Omitted when 0.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub cache_write_tokens: u64,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

impl TokenUsage {
    pub fn new(input_tokens: u64, output_tokens: u64) -> Self {
        Self { input_tokens, output_tokens, ..Self::default() }
    }

    /// Every token of the call: input (fresh, cached and cache writes) and output.
    pub fn total(&self) -> u64 {
        self.input_tokens + self.output_tokens + self.cache_read_tokens + self.cache_write_tokens
    }

    pub fn add(&mut self, other: TokenUsage) {
        self.input_tokens += other.input_tokens;
        self.output_tokens += other.output_tokens;
        self.cache_read_tokens += other.cache_read_tokens;
        self.cache_write_tokens += other.cache_write_tokens;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::usage::*;

    fn usage(i: u64, o: u64, r: u64, w: u64) -> TokenUsage {
        TokenUsage { input_tokens: i, output_tokens: o, cache_read_tokens: r, cache_write_tokens: w }
    }

    #[test]
    fn the_shipped_table_parses_and_every_price_is_sane() {
        let raw: PriceTable = serde_json::from_str(include_str!("../prices.json")).unwrap();
        assert_eq!(PriceTable::builtin(), raw);
        assert!(raw.models.len() > 20);
        for (model, price) in &raw.models {
            assert!(model.contains(':'), "{model}");
            price.check().unwrap();
        }
    }

    #[test]
    fn a_call_costs_its_tokens_at_their_prices() {
        let haiku = Price { input: 0.8, output: 4.0, cache_read: Some(0.08), cache_write: Some(1.0) };
        // 1,000 in × $0.80/M + 200 out × $4/M + 5,000 cached × $0.08/M + 100 written × $1/M
        // = 0.0008 + 0.0008 + 0.0004 + 0.0001 dollars.
        let cost = haiku.cost(&usage(1_000, 200, 5_000, 100)).unwrap();
        assert_eq!(cost.nanos, 2_100_000);
        assert_eq!(serde_json::to_value(cost).unwrap(), serde_json::json!(0.0021));
        assert_eq!(serde_json::from_value::<Cost>(serde_json::json!(0.0021)).unwrap(), cost);
        // Sub-nano-dollar prices still add up: 7 tokens at $0.035/M = 0.245 nano-dollars.
        let micro = Price { input: 0.035, output: 0.14, cache_read: None, cache_write: None };
        assert_eq!(micro.cost(&usage(7_000_000, 0, 0, 0)).unwrap().nanos, 245_000_000);
    }

    #[test]
    fn tokens_without_a_price_make_the_cost_unknown_not_zero() {
        let nova = Price { input: 0.06, output: 0.24, cache_read: None, cache_write: None };
        assert!(nova.cost(&usage(10, 10, 0, 0)).is_some());
        assert_eq!(nova.cost(&usage(10, 10, 5, 0)), None);
        let table = PriceTable::builtin();
        assert_eq!(table.cost("openai:some-model-nobody-priced", &usage(10, 10, 0, 0)), None);
        assert_eq!(table.cost("scripted:demo", &usage(10, 10, 0, 0)), None);
        assert_eq!(table.cost("not-a-reference", &usage(10, 10, 0, 0)), None);
        assert_eq!(table.cost("gemini:pro", &usage(10, 10, 0, 0)), None);
    }

    #[test]
    fn lookups_find_dated_snapshots_inference_profiles_and_provider_wildcards() {
        let table = PriceTable::builtin();
        let mini = table.price("openai:gpt-4o-mini").copied();
        assert!(mini.is_some());
        assert_eq!(table.price("openai:gpt-4o-mini-2024-07-18").copied(), mini);
        assert_eq!(table.price("openai:gpt-4o-mini-preview"), None);
        let sonnet = table.price("bedrock:anthropic.claude-sonnet-4-20250514-v1:0").copied();
        assert!(sonnet.is_some());
        assert_eq!(table.price("bedrock:us.anthropic.claude-sonnet-4-20250514-v1:0").copied(), sonnet);
        assert_eq!(table.price("bedrock:xx.anthropic.claude-sonnet-4-20250514-v1:0"), None);
        // a plain id is a Bedrock id
        assert_eq!(table.price("anthropic.claude-sonnet-4-20250514-v1:0").copied(), sonnet);
        assert_eq!(table.price("us.anthropic.claude-sonnet-4-20250514-v1:0").copied(), sonnet);
        assert_eq!(table.cost("ollama:llama3.1", &usage(1_000, 1_000, 0, 0)), Some(Cost::ZERO));
    }

    #[test]
    fn merged_prices_are_checked_and_win() {
        let mut table = PriceTable::builtin();
        let mine = Price { input: 1.0, output: 2.0, cache_read: None, cache_write: None };
        table.merge("ours-1".into(), BTreeMap::from([("openai:gpt-4o-mini".into(), mine)])).unwrap();
        assert_eq!(table.version, "ours-1");
        assert_eq!(table.price("openai:gpt-4o-mini"), Some(&mine));
        let bad = Price { input: -1.0, ..mine };
        let err = table.merge("x".into(), BTreeMap::from([("openai:y".into(), bad)])).unwrap_err();
        assert!(err.starts_with("prices.openai:y:"), "{err}");
        let err = table.merge("x".into(), BTreeMap::from([("plain".into(), mine)])).unwrap_err();
        assert!(err.contains("provider:model"), "{err}");
        assert_eq!(table.version, "ours-1", "a refused merge changes nothing");
    }

    #[test]
    fn counts_add_up_and_an_unpriced_call_is_counted_not_priced() {
        let mut total = UsageCounts::default();
        let priced =
            UsageCounts { calls: 1, input_tokens: 10, cost_usd: Some(Cost::from_nanos(5)), ..Default::default() };
        let unpriced = UsageCounts { calls: 1, output_tokens: 3, unpriced_calls: 1, ..Default::default() };
        total.add(&unpriced);
        assert_eq!(total.cost_usd, None);
        total.add(&priced);
        total.add(&priced);
        assert_eq!(total.cost_usd, Some(Cost::from_nanos(10)));
        assert_eq!((total.calls, total.unpriced_calls, total.input_tokens, total.output_tokens), (3, 1, 20, 3));
    }
}
