//! Reading a DynamoDB `Query` page after page (`ExclusiveStartKey` ← `LastEvaluatedKey`), so
//! that each reader says only what it asks, what it keeps and how many it wants. It does not
//! build queries or decode items; its callers do.

use aws_sdk_dynamodb::operation::query::builders::QueryFluentBuilder;
use switchboard_engine::StoreError;

use super::Item;
use super::codec::unavailable;

/// The pages of one query, read on demand.
pub(super) struct Pages {
    query: QueryFluentBuilder,
    start: Option<Item>,
    done: bool,
}

/// What [`Pages::take_until`] does with an item.
pub(super) enum Keep<T> {
    Item(T),
    Skip,
    /// Nothing of this item or any after it.
    Stop,
}

/// The pages of `query`, from after the item keyed `start` (from the first item without one).
pub(super) fn paginate(query: QueryFluentBuilder, start: Option<Item>) -> Pages {
    Pages { query, start, done: false }
}

impl Pages {
    /// The next page's items, at most `limit` of them (as evaluated: a `FilterExpression` may
    /// return fewer), or `None` once the last page has been read.
    async fn next(&mut self, limit: Option<usize>) -> Result<Option<Vec<Item>>, StoreError> {
        if self.done {
            return Ok(None);
        }
        let mut query = self.query.clone().set_exclusive_start_key(self.start.take());
        if let Some(limit) = limit {
            query = query.limit(i32::try_from(limit).unwrap_or(i32::MAX));
        }
        let out = query.send().await.map_err(|e| unavailable("Query", &e))?;
        match out.last_evaluated_key {
            Some(k) if !k.is_empty() => self.start = Some(k),
            _ => self.done = true,
        }
        Ok(Some(out.items.unwrap_or_default()))
    }

    /// Up to `want` items as `keep` maps them (`None`: passed over, as a filter would), asking
    /// each page for no more than are still wanted, so the pages stop once there are enough.
    pub(super) async fn take<T>(
        mut self,
        want: usize,
        mut keep: impl FnMut(Item) -> Result<Option<T>, StoreError>,
    ) -> Result<Vec<T>, StoreError> {
        let mut found = Vec::new();
        while found.len() < want {
            let Some(items) = self.next(Some(want - found.len())).await? else { break };
            for item in items {
                if found.len() < want
                    && let Some(kept) = keep(item)?
                {
                    found.push(kept);
                }
            }
        }
        Ok(found)
    }

    /// [`Pages::take`], except that `keep` may end the reading early ([`Keep::Stop`]).
    pub(super) async fn take_until<T>(
        mut self,
        want: usize,
        mut keep: impl FnMut(Item) -> Result<Keep<T>, StoreError>,
    ) -> Result<Vec<T>, StoreError> {
        let mut found = Vec::new();
        while found.len() < want {
            let Some(items) = self.next(Some(want - found.len())).await? else { break };
            for item in items {
                match keep(item)? {
                    Keep::Item(kept) if found.len() < want => found.push(kept),
                    Keep::Item(_) | Keep::Skip => {}
                    Keep::Stop => return Ok(found),
                }
            }
        }
        Ok(found)
    }

    /// Every item of every page that is left.
    pub(super) async fn all(mut self) -> Result<Vec<Item>, StoreError> {
        let mut items = Vec::new();
        while let Some(page) = self.next(None).await? {
            items.extend(page);
        }
        Ok(items)
    }
}
