//! A tenant's insights in its usage partition: one item per UTC hour, insight key and shard
//! (`INSIGHT#<YYYY-MM-DDTHH>#<agent>#<version>#<trigger>#<variant>#<channel>#<shard>`), added to by
//! one `Update` in the turn's `TransactWriteItems` ([`DynamoStore::insight_item`]), its counters
//! and its sketches' buckets as top-level numbers (`lat_<bucket>`, `frt_…`, `ttr_…`; `z` for the
//! zero bucket), so that an `ADD` needs no read. Read back by summing the shards
//! ([`DynamoStore::insight_rows`]).

use std::collections::{BTreeMap, HashMap};

use aws_sdk_dynamodb::types::{AttributeValue, TransactWriteItem, Update};
use chrono::{DateTime, Utc};
use switchboard_domain::TenantId;
use switchboard_domain::insights::{InsightCounts, InsightKey, InsightLine, InsightRow, Measure, ZERO_BUCKET};
use switchboard_domain::limits::USAGE_TTL_DAYS;
use switchboard_engine::{StoreError, TurnCommit};

use super::codec::{attr_s, build_err};
use super::keys::{USAGE_SHARDS, key, n, s, usage_pk};
use super::{DynamoStore, Item};

/// A key part that may hold any text (a channel's name): `%` and `#` escaped, so that two keys
/// never meet in one sort key.
fn part(text: Option<&str>) -> String {
    text.map_or_else(|| "-".to_owned(), |t| format!("={}", t.replace('%', "%25").replace('#', "%23")))
}

fn insight_sk(k: &InsightKey, shard: u128) -> String {
    format!(
        "INSIGHT#{}#{}#{}#{}#{}#{}#{shard:02}",
        k.hour.format("%Y-%m-%dT%H"),
        k.agent_id,
        k.agent_version,
        k.trigger_id.map_or_else(|| "-".to_owned(), |t| t.to_string()),
        part(k.variant.as_deref()),
        part(k.channel.as_deref()),
    )
}

/// A bucket's attribute: the measure's short name and the bucket (`z` for the zero one).
fn bucket_attr(m: Measure, bucket: i32) -> String {
    if bucket == ZERO_BUCKET { format!("{}_z", m.short()) } else { format!("{}_{bucket}", m.short()) }
}

fn parse_bucket_attr(name: &str) -> Option<(Measure, i32)> {
    let (short, bucket) = name.split_once('_')?;
    let m = Measure::parse_short(short)?;
    let b = if bucket == "z" { ZERO_BUCKET } else { bucket.parse().ok()? };
    Some((m, b))
}

impl DynamoStore {
    /// What `commit` adds to its insight row, on a shard picked by the execution id: one item
    /// write, `None` when the commit counts in no insight.
    pub(super) fn insight_item(&self, commit: &TurnCommit) -> Result<Option<TransactWriteItem>, StoreError> {
        let Some(line) = commit.insight() else { return Ok(None) };
        let InsightLine { key: k, counts, buckets } = &line;
        let shard = commit.execution.execution_id.0.random() % USAGE_SHARDS;
        let day = k.hour.date_naive();
        let ttl = day.and_time(chrono::NaiveTime::MIN).and_utc() + chrono::Duration::days(USAGE_TTL_DAYS);
        let mut names: HashMap<String, String> = HashMap::new();
        let mut values: HashMap<String, AttributeValue> = HashMap::new();
        let mut set = Vec::new();
        let fields = [
            ("hour", Some(s(k.hour.to_rfc3339_opts(chrono::SecondsFormat::Secs, true)))),
            ("agentId", Some(s(k.agent_id.to_string()))),
            ("agentVersion", Some(n(k.agent_version))),
            ("triggerId", k.trigger_id.map(|t| s(t.to_string()))),
            ("variant", k.variant.clone().map(s)),
            ("channel", k.channel.clone().map(s)),
            ("expiresAt", Some(n(ttl.timestamp()))),
        ];
        for (i, (name, value)) in fields.into_iter().enumerate() {
            let Some(value) = value else { continue };
            names.insert(format!("#f{i}"), name.to_owned());
            values.insert(format!(":f{i}"), value);
            set.push(format!("#f{i} = :f{i}"));
        }
        let mut add = Vec::new();
        for (i, (name, v)) in InsightCounts::NAMES.iter().zip(counts.values()).enumerate() {
            if v == 0 {
                continue;
            }
            names.insert(format!("#c{i}"), (*name).to_owned());
            values.insert(format!(":c{i}"), n(v));
            add.push(format!("#c{i} :c{i}"));
        }
        let mut seen: BTreeMap<String, u64> = BTreeMap::new();
        for (m, b) in buckets {
            *seen.entry(bucket_attr(*m, *b)).or_default() += 1;
        }
        for (i, (name, count)) in seen.into_iter().enumerate() {
            names.insert(format!("#b{i}"), name);
            values.insert(format!(":b{i}"), n(count));
            add.push(format!("#b{i} :b{i}"));
        }
        if add.is_empty() {
            // (a turn paused before it did anything: nothing to count yet)
            return Ok(None);
        }
        let update = Update::builder()
            .table_name(&self.names.executions_table)
            .set_key(Some(key(usage_pk(&commit.execution.tenant_id), insight_sk(k, shard))))
            .update_expression(format!("SET {} ADD {}", set.join(", "), add.join(", ")))
            .set_expression_attribute_names(Some(names))
            .set_expression_attribute_values(Some(values))
            .build()
            .map_err(build_err)?;
        Ok(Some(TransactWriteItem::builder().update(update).build()))
    }

    /// The tenant's insight rows of the hours `from..=to`, each key's shards added up.
    pub(super) async fn insight_rows(
        &self,
        tenant: &TenantId,
        from: DateTime<Utc>,
        to: DateTime<Utc>,
    ) -> Result<Vec<InsightRow>, StoreError> {
        let (from, to) = (from.format("%Y-%m-%dT%H"), to.format("%Y-%m-%dT%H"));
        let mut rows: BTreeMap<InsightKey, InsightRow> = BTreeMap::new();
        // `~` sorts after every character of the rest of the key.
        for item in self.usage_partition(tenant, format!("INSIGHT#{from}#"), format!("INSIGHT#{to}#~")).await? {
            let (key, row) = decode(&item)?;
            rows.entry(key).or_default().add(&row);
        }
        Ok(rows
            .into_iter()
            .map(|(key, mut row)| {
                row.key = Some(key);
                row
            })
            .collect())
    }
}

fn decode(item: &Item) -> Result<(InsightKey, InsightRow), StoreError> {
    let corrupt = |what: &str| StoreError::Corrupt(format!("insight item {what}"));
    let number = |v: &AttributeValue| v.as_n().ok().and_then(|n| n.parse::<u64>().ok());
    let text = |name: &str| item.get(name).and_then(|v| v.as_s().ok()).cloned();
    let hour = attr_s(item, "hour")?;
    let key = InsightKey {
        hour: DateTime::parse_from_rfc3339(hour).map_err(|_| corrupt("hour"))?.with_timezone(&Utc),
        agent_id: attr_s(item, "agentId")?.parse().map_err(|_| corrupt("agentId"))?,
        agent_version: item.get("agentVersion").and_then(number).ok_or_else(|| corrupt("agentVersion"))?,
        trigger_id: text("triggerId").map(|t| t.parse()).transpose().map_err(|_| corrupt("triggerId"))?,
        variant: text("variant"),
        channel: text("channel"),
    };
    let mut values = [0u64; 18];
    for (slot, name) in values.iter_mut().zip(InsightCounts::NAMES) {
        if let Some(v) = item.get(name) {
            *slot = number(v).ok_or_else(|| corrupt(&format!("{name} is not a count")))?;
        }
    }
    let mut row = InsightRow { counts: InsightCounts::from_values(values), ..InsightRow::default() };
    for (name, v) in item {
        if let Some((m, b)) = parse_bucket_attr(name) {
            let count = number(v).ok_or_else(|| corrupt(&format!("{name} is not a count")))?;
            row.sketches.entry(m).or_default().add_bucket(b, count);
        }
    }
    Ok((key, row))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn channels_with_the_separator_never_share_a_sort_key() {
        let hour = "2026-12-01T10:00:00Z".parse().unwrap_or_default();
        let agent = "01J00000000000000000000000".parse().unwrap_or_else(|_| switchboard_domain::AgentId::generate());
        let k = |variant: Option<&str>, channel: Option<&str>| InsightKey {
            hour,
            agent_id: agent,
            agent_version: 1,
            trigger_id: None,
            variant: variant.map(str::to_owned),
            channel: channel.map(str::to_owned),
        };
        assert_ne!(insight_sk(&k(Some("a#b"), Some("c")), 0), insight_sk(&k(Some("a"), Some("b#c")), 0));
        assert_ne!(insight_sk(&k(None, Some("-")), 0), insight_sk(&k(None, None), 0));
        assert_eq!(parse_bucket_attr(&bucket_attr(Measure::Resolution, ZERO_BUCKET)), Some((Measure::Resolution, -1)));
        assert_eq!(parse_bucket_attr("lat_417"), Some((Measure::Latency, 417)));
        assert_eq!(parse_bucket_attr("agentId"), None);
    }
}
