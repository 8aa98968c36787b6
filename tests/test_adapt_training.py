"""How an adaptation trains, recorded and shown (#61): a checkpoint that claims a classifier head it does not hold is
refused unless the campaign declares a new head; a full fine-tune at 5e-5 and LoRA at 1e-3 in one campaign, each
recorded and compared; the training order reshuffled per pass; the window's forward, backward and optimizer step
summed; a LoRA adapter that reloads with peft from another folder, tied to its base's revision; and the campaign page's
configuration, warm-up, memory estimate and rates.

One run for the module, started as a user would from the folder above the campaign's (`run A1/campaign.toml` with
`[model] path = "../base"`): the adapter's file held "A1/../base" before.
"""

from __future__ import annotations

import csv
import json
import os
import shutil

import pytest
from bs4 import BeautifulSoup

from iteralab.core.errors import UserError
from iteralab.pages import adapted as adapted_pages
from iteralab.run import runner
from iteralab.site.build import build_site
from iteralab.store import adaptation, reading
from iteralab.store.views import campaign_views
from tests.tiny import build_model, write_adaptation_campaign

CAMPAIGN = "tiny-adapt"
LORA_RATE = '\nlearning_rate = 1e-3\n'


def claiming_checkpoint(folder):
    """Save a tiny BERT encoder whose config.json names BertForSequenceClassification and its labels, without the head."""
    import transformers
    from transformers import BertModel

    classifier = build_model(folder / "classifier")
    transformers.logging.set_verbosity_error()  # its report of the head left out is this test's point, not news
    BertModel.from_pretrained(classifier).save_pretrained(folder / "base")
    for name in ("vocab.txt", "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json"):
        if (classifier / name).exists():
            shutil.copy(classifier / name, folder / "base" / name)
    config = json.loads((folder / "base" / "config.json").read_text())
    config.update(architectures=["BertForSequenceClassification"], id2label={"0": "neg", "1": "pos"},
                  label2id={"neg": 0, "pos": 1})
    (folder / "base" / "config.json").write_text(json.dumps(config))
    return folder / "base"


def campaign_in(folder, base, *, new_head: bool, name=CAMPAIGN):
    """Write the tiny campaign into FOLDER/A1 over BASE, named relative to it; the campaign's rate 5e-5, LoRA's 1e-3."""
    (folder / "A1").mkdir(exist_ok=True)
    path = write_adaptation_campaign(folder / "A1", base, name=name, repetitions=1, updates=6, adaptation=(
        ("new_head = true\n" if new_head else "") + 'shuffle = "every_pass"\n'))
    text = path.read_text().replace(f'path = "{base.as_posix()}"', 'path = "../base"')
    text = text.replace("[protocol.warmup]\nbatches = 0\n", "")  # an adaptation needs none
    text = text.replace("learning_rate = 0.001", "learning_rate = 5e-5").replace('method = "lora"\n', 'method = "lora"' + LORA_RATE)
    path.write_text(text)
    return path


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    folder = tmp_path_factory.mktemp("trained")
    base = claiming_checkpoint(folder)
    campaign_in(folder, base, new_head=True)
    with pytest.MonkeyPatch.context() as patch:
        patch.chdir(folder)
        result = runner.run_campaign(campaign_file=f"A1/{CAMPAIGN}.toml", runs_dir="runs", quiet=True, stages=False)
    assert [t["status"] for t in result.trials] == ["ok"] * 3, [t["error"] for t in result.trials]
    site = folder / "site"
    assert build_site(runs=folder / "runs", out=site, languages=("en",), processes=1)["failed"] == {}
    return folder, result, site


def trial_of(result, variant: str) -> dict:
    return next(t for t in result.trials if t["variant"] == variant)


def page(site, *parts) -> BeautifulSoup:
    return BeautifulSoup(site.joinpath(*parts).read_text(encoding="utf-8"), "html.parser")


@pytest.mark.slow
def test_a_checkpoint_claiming_a_head_it_does_not_hold_is_refused_unless_a_new_head_is_declared(trained, tmp_path):
    folder, result, site = trained
    shutil.copytree(folder / "base", tmp_path / "base")
    refused = campaign_in(tmp_path, tmp_path / "base", new_head=False)
    with pytest.raises(UserError) as caught:
        runner.prepare(refused, tmp_path / "runs")
    said = str(caught.value)
    assert "the checkpoint lacks weights a BertForSequenceClassification needs (classifier.bias, classifier.weight)" in said
    assert "its config.json names BertForSequenceClassification, a classifier whose head it does not hold" in said
    assert "[adaptation] new_head = true" in said
    # Declared on a checkpoint that holds its head: refused too, the record would say a loaded head was initialised.
    whole = write_adaptation_campaign(tmp_path, build_model(tmp_path / "whole"), name="whole", adaptation="new_head = true\n")
    with pytest.raises(UserError, match=r"new_head = true, but the checkpoint .* holds the classifier's head"):
        runner.prepare(whole, tmp_path / "runs")
    for trial in result.trials:
        head = trial["adaptation"]["head"]
        assert (head["state"], head["initialised_weights"], head["seed"]) == (
            "initialised", ["classifier.bias", "classifier.weight"], 1)
        section = page(site, "campaigns", CAMPAIGN, "trials.html").select_one(f"#{trial['record_id']}-adaptation")
        assert ("Classifier head initialised for training (classifier.bias, classifier.weight) with seed 1, as "
                "[adaptation] new_head declares") in section.get_text(" ", strip=True)


@pytest.mark.slow
def test_a_full_fine_tune_and_lora_run_in_one_campaign_each_at_its_own_learning_rate(trained):
    folder, result, site = trained
    rates = {t["variant"]: t["adaptation"]["optimizer"]["learning_rate"] for t in result.trials}
    assert rates == {"mb8": 5e-5, "mb4x2": 5e-5, "lora-mb8": 1e-3}
    lora = trial_of(result, "lora-mb8")
    assert lora["variant_config"]["learning_rate"] == 1e-3 and "learning_rate" not in trial_of(result, "mb8")["variant_config"]
    assert lora["adaptation"]["optimizer"]["set_by_variant"] == ["learning_rate"]
    assert result.manifest["variants"]["lora-mb8"]["learning_rate"] == 1e-3
    compared, constant = campaign_views(reading.load(folder / "runs"))[0].compared_and_constant()
    assert {key: values for key, values in compared.items() if key in ("batch_size", "method", "accumulation",
                                                                       "learning_rate")} == {
        "batch_size": ["4", "8"], "method": ["all", "lora"], "accumulation": ["1", "2"], "learning_rate": ["0.001", "5e-05"]}
    assert constant["optimizer"] == ["adamw"] and constant["weight_decay"] == ["0.0"]
    shown = page(site, "campaigns", CAMPAIGN, "index.html").select_one("#compared").get_text(" ", strip=True)
    assert "learning_rate 0.001, 5e-05" in shown and "method all, lora" in shown and "accumulation 1, 2" in shown
    section = page(site, "campaigns", CAMPAIGN, "trials.html").select_one(f"#{lora['record_id']}-adaptation")
    assert "adamw, learning rate 0.001, weight decay 0, constant schedule; set by the variant itself: learning_rate" in \
        section.get_text(" ", strip=True)


@pytest.mark.slow
def test_the_order_is_reshuffled_for_each_pass_and_the_window_parts_are_summed(trained):
    _, result, _ = trained
    for trial in result.trials:
        figures = trial["adaptation"]
        # 1 first update + 6 in the window, 8 examples each: 56 of 40 entries, a second pass begun, none skipped (40 = 5 × 8)
        assert figures["order"] == {"shuffle": "every_pass", "passes": 2, "entries_skipped_at_pass_ends": 0,
                                    "updates_across_passes": 0}
        parts = [figures[f"{part}_s"] for part in ("data", "forward", "backward", "optimizer_step")]
        assert all(value > 0 for value in parts)
        assert sum(parts) <= trial["phases"]["measured_window"]["duration_ns"] / 1e9
        accumulation = trial["variant_config"]["accumulation"]
        assert figures["window_parts"]["timer"] == "host_clock" and figures["window_parts"]["timed"] == {
            "data": 6 * accumulation, "forward": 6 * accumulation, "backward": 6 * accumulation, "optimizer_step": 6}
    assert "every_pass" in result.manifest["training_split"]["order"] or "anew for each" in result.manifest["training_split"]["order"]


@pytest.mark.slow
@pytest.mark.filterwarnings("ignore:.*is_gradient_checkpointing:FutureWarning")  # between peft and transformers 5
def test_the_exported_adapter_reloads_with_peft_from_another_folder_tied_to_its_base(trained, tmp_path, monkeypatch):
    import torch
    from peft import AutoPeftModelForSequenceClassification
    from transformers import AutoTokenizer

    folder, result, site = trained
    lora = trial_of(result, "lora-mb8")
    export = lora["adaptation"]["export"]
    held = json.loads((folder / "runs" / export["path"] / "adapter_config.json").read_text())["base_model_name_or_path"]
    assert held == str((folder / "base").resolve()) and os.path.isabs(held)  # not "A1/../base"
    assert export["base_model"]["revision"] == result.manifest["model"]["revision"]
    assert export["inside_adapter"] == ["classifier"]
    monkeypatch.chdir(tmp_path)  # another folder: the relative path resolved from nowhere here
    model = AutoPeftModelForSequenceClassification.from_pretrained(folder / "runs" / export["path"]).eval()
    tokenizer = AutoTokenizer.from_pretrained(folder / "base")
    rows = [json.loads(line) for line in (folder / "A1" / f"{CAMPAIGN}-validation.jsonl").read_text().splitlines()]
    with torch.inference_mode():
        logits = model(**tokenizer([row["text"] for row in rows], padding=True, truncation=True, max_length=24,
                                   return_tensors="pt")).logits
    recorded = list(csv.DictReader((folder / "runs" / lora["predictions"]["path"]).read_text().splitlines()))
    assert [["neg", "pos"][index] for index in logits.argmax(-1).tolist()] == [row["label"] for row in recorded]
    said = page(site, "campaigns", CAMPAIGN, "trials.html").select_one(f"#{lora['record_id']}-adaptation .export").get_text()
    assert f"Its adapter_config.json holds a path to the base model, {held}, not the model itself" in said
    assert export["base_model"]["revision"] in said and "The classifier head is inside the adapter" in said


@pytest.mark.slow
def test_the_campaign_page_keeps_each_configurations_settings_and_says_no_warm_up(trained):
    folder, result, site = trained
    soup = page(site, "campaigns", CAMPAIGN, "index.html")
    protocol = soup.select_one("#protocol").get_text(" ", strip=True)
    assert "Warm-up none: a model cannot be warmed without training it" in protocol and "batch(es)" not in protocol
    # The weights each variant trained: the head the base lacks and LoRA's matrices counted, not the base's count.
    base = result.manifest["model"]["parameters"]
    rows = {tr.th.get_text().split(" · ")[0]: [td.get_text(" ", strip=True) for td in tr.find_all("td")]
            for tr in soup.select("#memory-estimate table")[0].select("tbody tr")}
    for variant in ("mb8", "lora-mb8"):
        total = trial_of(result, variant)["adaptation"]["parameters"]["total_parameters"]
        assert total != base and rows[variant][0] == f"{total:,}"
    # A configuration whose trials are all set aside keeps its settings: they are its configuration's, not its outcomes'.
    summary = next(s for s in campaign_views(reading.load(folder / "runs"))[0].variants if s.name == "mb4x2")
    found = adaptation.figures([], summary.trials)
    assert found["method"] == "all" and found["effective_batch"]["examples"] == 8 and found["parameters"]
    assert found["memory"]["estimate"]["total_bytes"] > 0 and found["updates_per_s"]["median"] is None
    cells = str(adapted_pages.figure_cells(found, "en"))
    assert "no successful trial" not in cells.split("</td>")[0] and "4 × 2 × 1 = 8" in cells
