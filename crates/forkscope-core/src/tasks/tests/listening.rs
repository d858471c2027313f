//! Which task ids a listen is acknowledged for, and which reads of them are sent.

use super::super::listen::*;
use super::*;

fn made(tasks: &mut TaskTable, rng: &mut SplitMix64) -> TaskId {
    let work = Work {
        steps: 2,
        delay_ms: 0,
    };
    tasks
        .create(T0, TaskId::generate(rng), work, DEFAULT_TTL_MS, None, A)
        .unwrap()
        .id
}

fn ask(ids: &[&'static str], declares_tasks: bool) -> ListenAsk<'static> {
    ListenAsk {
        has_filter: true,
        task_ids: Some(Ok(ids.to_vec())),
        declares_tasks,
    }
}

#[test]
fn a_listen_for_tasks_needs_the_extension_and_names_a_bounded_list() {
    let id = "0123456789abcdef0123456789abcdef";
    assert_eq!(
        candidates(&ask(&[id], false), TaskListen::CurrentFirst),
        Err(ListenRefused::MissingCapability)
    );
    assert_eq!(ListenRefused::MissingCapability.code(), -32021);
    let many = vec![id; MAX_LISTENED_TASKS + 1];
    let too_many = ListenAsk {
        has_filter: true,
        task_ids: Some(Ok(many)),
        declares_tasks: true,
    };
    assert!(matches!(
        candidates(&too_many, TaskListen::CurrentFirst),
        Err(ListenRefused::TooMany { .. })
    ));
    let not_a_list = ListenAsk {
        has_filter: true,
        task_ids: Some(Err(())),
        declares_tasks: true,
    };
    assert_eq!(
        candidates(&not_a_list, TaskListen::CurrentFirst),
        Err(ListenRefused::NotAList)
    );
    // No taskIds asked: nothing to refuse, nothing to acknowledge.
    let none = ListenAsk {
        has_filter: true,
        task_ids: None,
        declares_tasks: false,
    };
    assert_eq!(candidates(&none, TaskListen::CurrentFirst), Ok(Vec::new()));
    let no_filter = ListenAsk {
        has_filter: false,
        ..none
    };
    assert_eq!(
        candidates(&no_filter, TaskListen::CurrentFirst),
        Err(ListenRefused::NoFilter)
    );
    // Not task ids, and one named twice: acknowledged once, the rest left out.
    let parsed = TaskId::parse(id).expect("a task id");
    assert_eq!(
        candidates(&ask(&[id, "nope", id], true), TaskListen::CurrentFirst),
        Ok(vec![parsed])
    );
    assert_eq!(
        candidates(&ask(&[id], true), TaskListen::NoTaskIds),
        Ok(Vec::new())
    );
    let refused = candidates(&ask(&[id], true), TaskListen::NotServed);
    assert_eq!(refused, Err(ListenRefused::NotServed));
    assert_eq!(ListenRefused::NotServed.code(), -32601);
}

#[test]
fn a_relisten_after_a_gap_is_told_the_end_only_under_the_fence() {
    let (mut tasks, mut rng) = table();
    let id = made(&mut tasks, &mut rng);
    // The task ends while no listen is open: the gap.
    tasks.step(T0.plus(10), id, 1, 1).unwrap();
    tasks.step(T0.plus(20), id, 1, 2).unwrap();
    tasks
        .settle(
            T0.plus(30),
            id,
            Some(Holder { epoch: 1, wrote: 0 }),
            Status::Completed,
            None,
        )
        .unwrap();
    let ended = tasks.get(id).unwrap().clone();

    let mut fence = Watch::new(TaskListen::CurrentFirst, [&ended]);
    assert!(!fence.over(), "the end is still to be sent");
    assert!(fence.read(id, Some(&ended)), "the state now is sent first");
    assert!(fence.over(), "an end sent is the last thing sent");
    assert!(!fence.read(id, Some(&ended)), "and never sent again");

    // The spec's minimum: what the acknowledgement read counts as known, so the end that
    // came in the gap is never sent, and the subscription ends with nothing told.
    let mut naive = Watch::new(TaskListen::ChangesOnly, [&ended]);
    assert!(naive.over());
    assert!(!naive.read(id, Some(&ended)));
}

#[test]
fn each_change_is_sent_once_and_a_task_gone_ends_its_watch() {
    let (mut tasks, mut rng) = table();
    let id = made(&mut tasks, &mut rng);
    let at_ack = tasks.get(id).unwrap().clone();
    let mut watch = Watch::new(TaskListen::ChangesOnly, [&at_ack]);
    assert!(!watch.read(id, Some(&at_ack)), "unchanged since the ack");
    tasks.step(T0.plus(10), id, 1, 1).unwrap();
    let stepped = tasks.get(id).unwrap().clone();
    assert!(watch.read(id, Some(&stepped)));
    assert!(
        !watch.read(id, Some(&stepped)),
        "the same state twice is sent once"
    );
    assert_eq!(watch.pending().collect::<Vec<_>>(), vec![id]);
    assert!(!watch.read(id, None), "gone: nothing to send");
    assert!(watch.over());
    assert_eq!(watch.pending().count(), 0);
}
