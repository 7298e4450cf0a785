//! The aggregator alone: routing by (post, user), takes, busy shards, and
//! the accounting of messages and bytes.

use super::*;
use crate::event::{LikeKind, Version};

fn event(post: &str, user: &str) -> Item {
    Item::Event(
        LikeEvent::new(
            LikeKind::Added,
            post,
            user,
            &Version {
                seq: 0,
                occurred_at_micros: 0,
                event_id: format!("{post}-{user}"),
            },
            None,
        )
        .expect("valid test event"),
    )
}

#[test]
fn one_membership_always_lands_in_one_shard() {
    let agg: Aggregator<u32> = Aggregator::new(8, 100);
    let pending = |handle, user: &str| Pending {
        handle,
        item: event("hot", user),
        bytes: 1,
        published: None,
    };
    for u in 0..20 {
        let user = format!("u{u}");
        let first = agg.add(pending(0, &user));
        for i in 1..5 {
            assert_eq!(agg.add(pending(i, &user)), first);
        }
    }
    assert_eq!(agg.total_len(), 100);
}

#[test]
fn one_post_spreads_over_the_shards_so_it_can_be_in_several_batches() {
    let agg: Aggregator<u32> = Aggregator::new(8, 100);
    let shards: std::collections::HashSet<usize> = (0..200)
        .map(|i| {
            agg.add(Pending {
                handle: i,
                item: event("viral", &format!("u{i}")),
                bytes: 1,
                published: None,
            })
        })
        .collect();
    assert_eq!(shards.len(), 8, "200 users of one post reach every shard");
    // Two merged takes with the first one's shards busy: both hold the
    // post, and no user is in both.
    let (first, used) = agg.take_merged(&[], Instant::now());
    assert!(first.len() == 100 && !used.is_empty());
    let mut busy = vec![false; 8];
    for s in &used {
        busy[*s] = true;
    }
    let (second, _) = agg.take_merged(&busy, Instant::now());
    assert!(!second.is_empty());
    let users = |t: &Taken<u32>| -> std::collections::HashSet<String> {
        t.events
            .iter()
            .map(|e| e.item.user_id().to_owned())
            .collect()
    };
    assert!(users(&first).is_disjoint(&users(&second)));
}

#[test]
fn the_post_user_boundary_is_part_of_the_route() {
    let agg: Aggregator<u32> = Aggregator::new(64, 100);
    let spread: std::collections::HashSet<usize> = (0..32)
        .map(|i| {
            let post = "p".repeat(i + 1);
            let user = "p".repeat(40 - i);
            agg.shard_of(&event(&post, &user))
        })
        .collect();
    assert!(
        spread.len() > 8,
        "same concatenation, different keys: {spread:?}"
    );
}

#[test]
fn take_returns_each_handle_once_in_batches() {
    let agg: Aggregator<u32> = Aggregator::new(1, 4);
    for i in 0..10 {
        agg.add(Pending {
            handle: i,
            item: event("p", &format!("u{i}")),
            bytes: 10,
            published: None,
        });
    }
    let mut seen = Vec::new();
    loop {
        let t = agg.take(0);
        if t.is_empty() {
            break;
        }
        assert!(t.len() <= 4);
        seen.extend(t.handles);
    }
    assert_eq!(seen, (0..10).collect::<Vec<_>>());
    assert_eq!(agg.total_bytes(), 0);
    assert_eq!(agg.free_view(&[]).oldest, None);
}

#[test]
fn poison_and_events_are_separated_with_their_handles() {
    let agg: Aggregator<&str> = Aggregator::new(1, 10);
    agg.add(Pending {
        handle: "a",
        item: event("p", "u"),
        bytes: 1,
        published: None,
    });
    let poison = PoisonRecord::new("m1".into(), "bad".into(), b"x", Default::default());
    agg.add(Pending {
        handle: "b",
        item: Item::Poison(Box::new(poison)),
        bytes: 1,
        published: None,
    });
    let t = agg.take(0);
    assert_eq!(t.events.len(), 1);
    assert_eq!(t.poison.len(), 1);
    assert_eq!(t.handles, vec!["a", "b"]);
}

#[test]
fn per_message_routing_spreads_one_post_over_all_shards() {
    let agg: Aggregator<u32> = Aggregator::per_message(4);
    for i in 0..8 {
        agg.add(Pending {
            handle: i,
            item: event("hot", &format!("u{i}")),
            bytes: 1,
            published: None,
        });
    }
    assert!((0..4).all(|s| agg.len(s) == 2));
    assert!(
        agg.free_view(&[false, true, true, true]).full,
        "one message is a full batch"
    );
}

#[tokio::test(start_paused = true)]
async fn oldest_tracks_the_first_message_of_the_buffer() {
    let agg: Aggregator<u32> = Aggregator::new(1, 2);
    let t0 = Instant::now();
    agg.add_at(
        Pending {
            handle: 1,
            item: event("p", "a"),
            bytes: 1,
            published: None,
        },
        t0,
    );
    tokio::time::advance(std::time::Duration::from_millis(5)).await;
    agg.add(Pending {
        handle: 2,
        item: event("p", "b"),
        bytes: 1,
        published: None,
    });
    agg.add(Pending {
        handle: 3,
        item: event("p", "c"),
        bytes: 1,
        published: None,
    });
    assert_eq!(agg.free_view(&[]).oldest, Some(t0));
    assert!(agg.free_view(&[]).full);
    let _ = agg.take(0);
    assert!(agg.free_view(&[]).oldest.unwrap() > t0);
}

#[tokio::test]
async fn a_count_asked_for_wakes_the_flusher_once_though_no_shard_turns_non_empty() {
    let agg: Aggregator<u32> = Aggregator::new(1, 1000);
    let add = |handle: u32| {
        agg.add(Pending {
            handle,
            item: event("p", &format!("u{handle}")),
            bytes: 1,
            published: None,
        });
    };
    add(0);
    agg.woken().await; // the shard turned non-empty
    agg.wake_when_buffered(Some(5));
    let woken = || futures::FutureExt::now_or_never(agg.woken()).is_some();
    for handle in 1..4 {
        add(handle);
    }
    assert!(!woken(), "4 buffered, 5 asked for");
    add(4);
    assert!(woken(), "the fifth wakes it");
    add(5);
    assert!(!woken(), "once: the count was taken back");
    agg.wake_when_buffered(Some(7));
    agg.wake_when_buffered(None);
    add(6);
    assert!(!woken(), "a count forgotten wakes nothing");
}
