//! Idle sessions on both profiles: the sessions waiting on their customers are listed once their
//! idle time has passed, across tenants and the longest idle first, for as long as their latest
//! write says so; and closing one as abandoned counts it in its tenant's insights, under the
//! trigger and agent version of the turn that left it waiting, once.

use switchboard_domain::IdleClose;
use switchboard_domain::insights::Report;

use super::*;

/// Commits `s` as a new session whose turn left it waiting on its customer, closing after
/// `minutes` (as the executor does when its tenant closes idle sessions).
async fn waiting(x: &Subject, mut s: Session, minutes: u32, trigger: TriggerId) -> Session {
    s.rest(Some(minutes), Some(trigger), 3);
    let source = format!("message-{}:m-1", s.conversation_id);
    x.sessions.commit_turn(&create(&s, &source, s.updated_at)).await.unwrap();
    s
}

/// Writes `s` changed by `change` at its next version.
async fn rewrite(x: &Subject, s: &Session, change: impl FnOnce(&mut Session)) -> Session {
    let mut next = s.clone();
    change(&mut next);
    next.version += 1;
    x.sessions.write_session(&SessionWrite { session: next.clone(), expected_version: Some(s.version) }).await.unwrap();
    next
}

pub(super) async fn idle_sessions_are_listed_when_due_until_written_otherwise_and_close_once(x: &Subject) {
    let (t, other) = (tenant("t-idle"), tenant("t-idle-2"));
    for id in [&t, &other] {
        x.config_admin.create_tenant(id, "Idle").await.unwrap();
    }
    let now = x.clock.now();
    let trigger = TriggerId::generate();
    let min = |m: i64| now + Duration::minutes(m);
    // given sessions waiting on their customers, due in 30, 10 and 20 minutes, another tenant's
    // due in 5, and one its tenant keeps open (no idle time)
    let late = waiting(x, start(&t, "c-late", now), 30, trigger).await;
    let first = waiting(x, start(&t, "c-first", now), 10, trigger).await;
    let middle = waiting(x, start(&t, "c-middle", now), 20, trigger).await;
    let theirs = waiting(x, start(&other, "c-theirs", now), 5, trigger).await;
    let kept = start(&t, "c-kept", now);
    x.sessions.commit_turn(&create(&kept, "message-c-kept:m-1", now)).await.unwrap();
    let listed = |at: DateTime<Utc>, limit: usize| async move {
        let due = x.sessions.idle_sessions(at, limit).await.unwrap();
        due.into_iter().map(|d| (d.tenant_id.to_string(), d.session_id)).collect::<Vec<_>>()
    };
    // then none is due before its time, and each is once it has come, every tenant's, the longest
    // idle first, as many as asked
    assert_eq!(listed(min(4), 10).await, vec![]);
    let expected = vec![
        ("t-idle-2".to_owned(), theirs.session_id),
        ("t-idle".to_owned(), first.session_id),
        ("t-idle".to_owned(), middle.session_id),
    ];
    assert_eq!(listed(min(25), 10).await, expected);
    assert_eq!(listed(min(25), 2).await, expected[..2]);
    assert_eq!(listed(min(30), 10).await.len(), 4, "exactly at its time it is due");
    // when a message moves one's time on, a person takes one over and one pauses for an approval
    let first = rewrite(x, &first, |s| s.rest(Some(60), Some(trigger), 3)).await;
    rewrite(x, &middle, |s| {
        s.status = SessionStatus::HandedOff;
        s.handed_off_to = Some(HandoffTarget::Human);
    })
    .await;
    rewrite(x, &late, |s| *s = paused(s, "message-c-late:m-2", ExecutionId::generate(), now)).await;
    // then each is listed as its latest write says
    assert_eq!(listed(min(59), 10).await, vec![("t-idle-2".to_owned(), theirs.session_id)]);
    assert_eq!(
        listed(min(60), 10).await,
        vec![("t-idle-2".to_owned(), theirs.session_id), ("t-idle".to_owned(), first.session_id)]
    );
    // when one is closed as abandoned, as the idle sweep commits it
    x.clock.advance(Duration::minutes(61));
    let closed_at = x.clock.now();
    let mut abandoned = first.clone();
    abandoned.status = SessionStatus::Abandoned;
    abandoned.ended_at = Some(closed_at);
    abandoned.updated_at = closed_at;
    abandoned.version += 1;
    let mut close = record(&abandoned, &format!("idle-{}", first.session_id), closed_at);
    (close.status, close.trigger_id, close.token_usage) =
        (ExecutionStatus::Abandoned, Some(trigger), TokenUsage::default());
    let commit = TurnCommit {
        events: vec![],
        sessions: vec![SessionWrite { session: abandoned, expected_version: Some(first.version) }],
        execution: close,
        content: vec![],
        resumes: None,
        coalesced: vec![],
    };
    x.sessions.commit_turn(&commit).await.unwrap();
    // then it is listed no more, a second close of it is refused, and the tenant's insights count
    // it once, under the trigger and agent version its idle time was set with, and nothing else
    assert_eq!(listed(closed_at, 10).await, vec![("t-idle-2".to_owned(), theirs.session_id)]);
    let again = x.sessions.commit_turn(&commit).await;
    assert!(matches!(again, Err(StoreError::Duplicate(_) | StoreError::VersionConflict(_))), "{again:?}");
    let rows = x.executions.insights(&t, hour_of(now), hour_of(closed_at)).await.unwrap();
    let total = Report::of(&rows, &[], &jiff::tz::TimeZone::UTC).total;
    assert_eq!(total.counts.abandoned, 1);
    assert_eq!(total.counts.conversations, 4, "the four first turns opened theirs");
    let row = rows.iter().find(|r| r.counts.abandoned == 1).unwrap();
    let key = row.key.as_ref().unwrap();
    assert_eq!((key.trigger_id, key.agent_version, key.agent_id), (Some(trigger), 3, first.agent_id));
    assert_eq!((row.counts.executions, row.sketches.len()), (0, 0), "nothing ran for the close");
    let stored = x.sessions.get_session(&t, first.session_id).await.unwrap().unwrap();
    assert_eq!(stored.status, SessionStatus::Abandoned);
    let idle = stored.idle.expect("the close keeps when it was due and what it counts under");
    assert_eq!(idle, IdleClose { at: min(60), trigger_id: Some(trigger), agent_version: 3 });
    let theirs_rows = x.executions.insights(&other, hour_of(now), hour_of(closed_at)).await.unwrap();
    assert!(theirs_rows.iter().all(|r| r.counts.abandoned == 0), "another tenant's insights count none");
}
