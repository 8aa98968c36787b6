"""iteralab exclude and withdraw: trials set aside under a documented rule, and the rule taken back."""

from __future__ import annotations

import click

from iteralab.cli.options import emit, json_option, runs_option
from iteralab.ledger import exclusions


@click.command()
@click.option("--campaign", required=True, help="campaign of the trials")
@click.option("--rule", required=True, help="the outside cause, stated so that anyone can apply it to every trial")
@click.option("--trial", "trial_ids", required=True, multiple=True, metavar="TRIAL_ID", help="a trial the rule sets aside (repeat)")
@click.option("--document", required=True, metavar="FILE_OR_TEXT",
              help="the evidence: a file (kept beside the records with its sha256) or a sentence")
@click.option("--checked", multiple=True, metavar="CONFIGURATION",
              help="a configuration (label or id) whose trials were checked against the rule (repeat; default: every one)")
@runs_option()
@json_option
def exclude(campaign, rule, trial_ids, document, checked, runs, as_json):
    """Set trials aside under a documented rule applied to every configuration; they stay in the records and on the site."""
    record = exclusions.add_exclusion(runs_dir=runs, campaign=campaign, rule=rule, trials=trial_ids, document=document,
                                      checked=checked)
    emit(as_json, record, exclusions.describe_exclusion(record))


@click.command()
@click.option("--campaign", required=True, help="campaign of the exclusion")
@click.option("--exclusion", "exclusion_id", required=True, metavar="EXCLUSION_ID", help="the exclusion to take back")
@click.option("--reason", required=True, help="why it no longer applies")
@runs_option()
@json_option
def withdraw(campaign, exclusion_id, reason, runs, as_json):
    """Withdraw an exclusion, with the reason: its trials count again, and both records stay."""
    record = exclusions.withdraw_exclusion(runs_dir=runs, campaign=campaign, exclusion_id=exclusion_id, reason=reason)
    emit(as_json, record, exclusions.describe_withdrawal(record))
