"""rlft.run.step_plan: the one decision after a step that RunCallback and PPO's loop act on."""

from rlft.run.step_plan import after_step, check_due


def plan(step=3, total=10, **kw):
    args = dict(checked=False, has_checks=True, out_of_time=False, interrupted=False, alarm_stop=False, prune=False)
    args.update(kw)
    return after_step(step, total, **args)


def test_checks_are_due_every_n_steps_and_at_the_last():
    assert [s for s in range(1, 11) if check_due(s, 10, 4)] == [4, 8, 10]
    assert not any(check_due(s, 10, None) for s in range(1, 11))


def test_a_plain_step_goes_on():
    p = plan()
    assert p.ending is None and not p.stop and not p.save and not p.samples and not p.closing_check and not p.log


def test_the_time_limit_gets_a_closing_check_only_where_none_ran():
    assert plan(out_of_time=True).closing_check
    assert not plan(out_of_time=True, checked=True).closing_check
    assert not plan(out_of_time=True, has_checks=False).closing_check
    p = plan(out_of_time=True, checked=True)
    assert p.ending == "time_limit" and p.log and not p.save and not p.samples


def test_the_time_limit_saves_only_where_the_run_saves_checkpoints():
    assert plan(out_of_time=True, saves_checkpoints=True).save
    assert not plan(out_of_time=True).save


def test_the_last_step_is_never_ended_by_the_time_limit():
    p = plan(step=10, out_of_time=True)
    assert p.ending is None and not p.closing_check and not p.log


def test_a_signal_or_an_alarm_ends_with_a_checkpoint_and_wins_over_the_time_limit():
    p = plan(interrupted=True, out_of_time=True)
    assert p.ending == "interrupted" and p.save and p.samples and not p.closing_check
    assert plan(alarm_stop=True).ending == "stopped" and plan(alarm_stop=True).save
    assert plan(interrupted=True, alarm_stop=True).ending == "interrupted"


def test_a_pruned_trial_ends_without_a_checkpoint():
    p = plan(prune=True)
    assert p.ending == "pruned" and p.stop and not p.save


def test_the_loops_own_cadence_saves_with_samples_but_not_at_the_last_step():
    assert [s for s in range(1, 11) if plan(step=s, save_steps=5).save] == [5]
    assert plan(step=5, save_steps=5).samples
