"""Privacy (issue 48, item 6): do BHerd, FedAdam, FedUMF and FedGSNR keep their speed-up over FedAvg under
client-level DP?

Four settings, each run without DP and under DP-FedAvg at ε 8, 4 and 1 (δ = 1e-5); at each level, each method
against FedAvg at the same level, as two rows (rounds to the target, and the training loss averaged over the
rounds), and what DP costs FedAvg's final accuracy. BHerd and FedAdam at BHerd's Case 2 quick setting (the field
report's, where FedAdam's η_s was chosen; ``CLAIMS``), FedUMF at its own IID quick setting (the field report's
fedumf_iid base; ``FEDUMF_CLAIMS``), FedGSNR at its own quick setting with its plan made private
(fedaccel.algorithms.dp_plan; ``FEDGSNR_CLAIMS``), and BHerd, FedAdam and FedUMF with 1,000 clients, 100 a round
(``MANY_CLAIMS``), where DP leaves FedAvg learning.
"""

from __future__ import annotations

from typing import Any

from fedaccel.report.claims import Claim, final, speed
from fedaccel.reproductions.opening import Finding, Opening

TITLE = "Privacy — BHerd, FedAdam, FedUMF and FedGSNR against FedAvg under client-level differential privacy"

EXPERIMENT = "dp_case2"
CLIP, DELTA = 0.043, 1e-5
LEVELS: tuple[float | None, ...] = (None, 8, 4, 1)  # ε; None: no DP
TARGET = 0.93
PAPER = "issue 48: DP-FedAvg (McMahan et al., ICLR 2018) with each method"


def _with_dp(algorithm: dict[str, Any], epsilon: float | None, clip: float = CLIP) -> dict[str, Any]:
    if epsilon is None:
        return {"algorithm": algorithm}
    return {"algorithm": {**algorithm, "dp": {"clip": clip, "target_epsilon": epsilon, "delta": DELTA}}}


def _level(epsilon: float | None) -> str:
    return "without DP" if epsilon is None else f"under client-level DP at ε = {epsilon:g} (δ = {DELTA:g})"


FEDAVG = {"name": "fedavg"}
METHODS = {"BHerd": {"name": "bherd", "alpha": 0.5},
           "FedAdam (η_s 0.03)": {"name": "fedavg", "server_opt": {"name": "adam", "lr": 0.03}}}

CLAIMS = [
    *(claim for epsilon in LEVELS for label, method in METHODS.items()
      for claim in speed(f"{label} reaches {TARGET:.0%} sooner than FedAvg {_level(epsilon)}", EXPERIMENT,
                         _with_dp(method, epsilon), _with_dp(FEDAVG, epsilon), TARGET, PAPER)),
    *(Claim(f"DP at ε = {epsilon:g} costs FedAvg final test accuracy", EXPERIMENT, _with_dp(FEDAVG, epsilon),
            _with_dp(FEDAVG, None), final(), "less", PAPER) for epsilon in LEVELS if epsilon is not None),
]

# FedUMF at its own quick setting (the field report's fedumf_iid base: IID, C = 0.1, 2NN), which client-level DP
# admits: experiments/privacy/quick/dp_fedumf.yaml, S = FedAvg's median round-1 upload norm on tuning seed 100;
# the target is the field report's for this setting.
FEDUMF_EXPERIMENT = "dp_fedumf"
FEDUMF_CLIP, FEDUMF_TARGET = 0.31, 0.80
FEDUMF = {"name": "fedumf", "alpha": 1.0}
FEDUMF_SETTING = "at FedUMF's IID setting (C = 0.1)"

FEDUMF_CLAIMS = [
    *(claim for epsilon in LEVELS
      for claim in speed(f"FedUMF reaches {FEDUMF_TARGET:.0%} sooner than FedAvg {FEDUMF_SETTING} {_level(epsilon)}",
                         FEDUMF_EXPERIMENT, _with_dp(FEDUMF, epsilon, FEDUMF_CLIP),
                         _with_dp(FEDAVG, epsilon, FEDUMF_CLIP), FEDUMF_TARGET, PAPER)),
    *(Claim(f"{FEDUMF_SETTING[0].upper()}{FEDUMF_SETTING[1:]}, DP at ε = {epsilon:g} lowers FedAvg's final test "
            "accuracy", FEDUMF_EXPERIMENT, _with_dp(FEDAVG, epsilon, FEDUMF_CLIP), _with_dp(FEDAVG, None), final(),
            "less", PAPER) for epsilon in LEVELS if epsilon is not None),
]

CLAIMS += FEDUMF_CLAIMS
_FEDUMF_ROW = f"FedUMF reaches {FEDUMF_TARGET:.0%} sooner than FedAvg {FEDUMF_SETTING}"  # the opening cites its rows


# --- FedGSNR (issue 48, item 6): its private plan against FedAvg at its own quick setting ------------------------
# experiments/privacy/quick/dp_fedgsnr.yaml; written with that file, before any of its judged runs.

GSNR_EXPERIMENT = "dp_fedgsnr"
GSNR_CLIP, GSNR_PLAN_CLIP = 0.93, {"g": 1.05, "s": 0.51, "n": 0.2}  # S, C_g, C_s, n_max: seed 100's round-1 medians
GSNR_TARGET = 0.75
FEDGSNR = {"name": "fedgsnr", "samples": 64, "e_const": 20}
GSNR_PAPER = "issue 48: FedGSNR (paper 003) with a private plan (fedaccel.algorithms.dp_plan) and DP-FedAvg"


def _gsnr_dp(algorithm: dict[str, Any], epsilon: float | None) -> dict[str, Any]:
    """A cell of dp_fedgsnr: ``algorithm`` without DP, or under DP at ``epsilon`` (FedGSNR with its plan's clips)."""
    if epsilon is None:
        return {"algorithm": algorithm}
    dp: dict[str, Any] = {"clip": GSNR_CLIP, "target_epsilon": epsilon, "delta": DELTA}
    if algorithm["name"] == "fedgsnr":
        dp["plan_clip"] = GSNR_PLAN_CLIP
    return {"algorithm": {**algorithm, "dp": dp}}


FEDGSNR_CLAIMS = [
    *(claim for epsilon in LEVELS
      for claim in speed(f"FedGSNR reaches {GSNR_TARGET:.0%} sooner than FedAvg at FedGSNR's setting, "
                         f"{_level(epsilon)}", GSNR_EXPERIMENT, _gsnr_dp(FEDGSNR, epsilon), _gsnr_dp(FEDAVG, epsilon),
                         GSNR_TARGET, GSNR_PAPER)),
    *(Claim(f"At FedGSNR's setting, DP at ε = {epsilon:g} lowers FedAvg's final test accuracy", GSNR_EXPERIMENT,
            _gsnr_dp(FEDAVG, epsilon), _gsnr_dp(FEDAVG, None), final(), "less", GSNR_PAPER)
      for epsilon in LEVELS if epsilon is not None),
]
CLAIMS += FEDGSNR_CLAIMS


# --- Many clients (issue 48, item 6, beyond the methods' own settings): a setting where DP leaves FedAvg learning --
# experiments/privacy/quick/dp_many.yaml (Case 2's SVM over 1,000 clients, 100 a round); written with that file, before
# any of its judged runs.

MANY_EXPERIMENT = "dp_many"
MANY_CLIP, MANY_TARGET = 0.19, 0.92  # S: FedAvg's median round-1 upload norm on tuning seed 100
MANY_SETTING = "with 1,000 clients, 100 a round"
MANY_METHODS = {"BHerd": {"name": "bherd", "alpha": 0.5},
                "FedAdam (η_s 0.01)": {"name": "fedavg", "server_opt": {"name": "adam", "lr": 0.01}},
                "FedUMF": {"name": "fedumf", "fraction": 0.1, "alpha": 1.0}}

MANY_CLAIMS = [
    *(claim for epsilon in LEVELS for label, method in MANY_METHODS.items()
      for claim in speed(f"{label} reaches {MANY_TARGET:.0%} sooner than FedAvg {MANY_SETTING}, {_level(epsilon)}",
                         MANY_EXPERIMENT, _with_dp(method, epsilon, MANY_CLIP), _with_dp(FEDAVG, epsilon, MANY_CLIP),
                         MANY_TARGET, PAPER)),
    *(Claim(f"{MANY_SETTING[0].upper()}{MANY_SETTING[1:]}, DP at ε = {epsilon:g} lowers FedAvg's final test accuracy",
            MANY_EXPERIMENT, _with_dp(FEDAVG, epsilon, MANY_CLIP), _with_dp(FEDAVG, None), final(), "less", PAPER)
      for epsilon in LEVELS if epsilon is not None),
]
CLAIMS += MANY_CLAIMS


def _many(label: str, *levels: float | None) -> tuple[str, ...]:
    """The claim texts (rounds and loss rows) of ``label`` against FedAvg with many clients at each level."""
    return tuple(f"{label} reaches {MANY_TARGET:.0%} sooner than FedAvg {MANY_SETTING}, {_level(e)}" for e in levels)

OPENING = Opening("Do BHerd, FedAdam, FedUMF and FedGSNR keep their speed-up over FedAvg under client-level DP?", (
    Finding("Without DP, FedAdam reaches 93% about three times sooner than FedAvg (7.8 against 23.5 rounds), with a "
            "lower training loss averaged over the rounds.",
            ("FedAdam (η_s 0.03) reaches 93% sooner than FedAvg without DP",), "agrees"),
    Finding("BHerd's rounds to 93% and its training loss we could not tell from FedAvg's (23.5 rounds each).",
            ("BHerd reaches 93% sooner than FedAvg without DP",), "could not tell"),
    Finding("Under client-level DP at ε = 8, 4 and 1 (δ = 1e-5) the noise costs FedAvg 30, 37 and 43 points of final "
            "test accuracy (0.941 without DP; 0.638, 0.570 and 0.515 with it; 0.5 is chance on even/odd).",
            ("costs FedAvg final test accuracy",), "agrees"),
    Finding("No run under DP reaches 93% within the 60 rounds, so no speed-up is left to keep: we could not tell "
            "either method's rounds from FedAvg's at any ε (every run counted at the budget).",
            ("sooner than FedAvg under client-level DP",), "could not tell", measure="rounds to"),
    Finding("FedAdam keeps a far lower training loss averaged over the rounds than FedAvg at every ε (6.2 against "
            "11.5 at ε = 8, 8.6 against 43 at ε = 4, 13 against 745 at ε = 1): its normalised server step keeps the "
            "noise from blowing up the squared hinge loss as FedAvg's plain step lets it.",
            ("FedAdam (η_s 0.03) reaches 93% sooner than FedAvg under client-level DP",), "agrees",
            measure="train loss"),
    Finding("BHerd's training loss under DP is FedAvg's but for the fourth digit: higher at ε = 8 (by 0.001 of 11.5),",
            ("BHerd reaches 93% sooner than FedAvg under client-level DP at ε = 8 (",), "disagrees",
            measure="train loss"),
    Finding("and at ε = 4 and 1 we could not tell.",
            ("BHerd reaches 93% sooner than FedAvg under client-level DP at ε = 4 (",
             "BHerd reaches 93% sooner than FedAvg under client-level DP at ε = 1 ("), "could not tell",
            measure="train loss"),
    Finding("At FedUMF's own IID setting (C = 0.1), without DP FedUMF reaches 80% 1.65× sooner than FedAvg (22.1 "
            "against 36.6 rounds), with a lower training loss averaged over the rounds (0.604 against 0.707).",
            (f"{_FEDUMF_ROW} without DP",), "agrees"),
    Finding("There DP at ε = 8, 4 and 1 costs FedAvg about 70 points of final test accuracy (0.813 without DP; 0.109, "
            "0.109 and 0.107 with it, where 0.10 is chance over ten classes).",
            ("At FedUMF's IID setting (C = 0.1), DP at ε",), "agrees"),
    Finding("No run under DP reaches 80% within the 60 rounds (every one stays near chance), so we could not tell "
            "FedUMF's rounds from FedAvg's at any ε: no speed-up is left to keep.",
            (f"{_FEDUMF_ROW} under client-level DP",), "could not tell", measure="rounds to"),
    Finding("FedUMF's training loss averaged over the rounds is lower than FedAvg's at ε = 8 and 4, by 81 of about "
            "9,200 and 132 of about 41,000 (under 1%), between two models the noise leaves at chance accuracy.",
            (f"{_FEDUMF_ROW} under client-level DP at ε = 8 (", f"{_FEDUMF_ROW} under client-level DP at ε = 4 ("),
            "agrees", measure="train loss"),
    Finding("At ε = 1 we could not tell its training loss from FedAvg's.",
            (f"{_FEDUMF_ROW} under client-level DP at ε = 1 (",), "could not tell", measure="train loss"),
    Finding("At FedGSNR's own setting, without DP FedGSNR reaches 75% about 2.6 times sooner than FedAvg (12.6 "
            "against 32.7 rounds), with a lower training loss averaged over the rounds (0.68 against 0.84).",
            ("FedGSNR reaches 75% sooner than FedAvg at FedGSNR's setting, without DP",), "agrees"),
    Finding("Under client-level DP at ε = 8, 4 and 1 FedAvg ends there at 9.3% test accuracy, against 78% without "
            "DP (10% is chance).",
            ("At FedGSNR's setting, DP at ε",), "agrees"),
    Finding("No run under DP reaches 75%, so we could not tell FedGSNR's rounds from FedAvg's at any ε.",
            ("FedGSNR reaches 75% sooner than FedAvg at FedGSNR's setting, under client-level DP",), "could not tell",
            measure="rounds to"),
    Finding("And FedGSNR's training loss averaged over the rounds is about eight times FedAvg's at every ε (6.0e5 "
            "against 7.4e4 at ε = 8, 3.6e6 against 4.5e5 at ε = 4, 1.5e8 against 1.9e7 at ε = 1): at the same ε its "
            "model carries twice FedAvg's noise, and its private plan, mostly noise (n̄ at or below 0 in 263 of 500 "
            "rounds at ε = 8, which gives every client with n_k > 0 the cap of 200 steps), has a client take 60 to "
            "79 local steps a round on average against FedAvg's 20.",
            ("FedGSNR reaches 75% sooner than FedAvg at FedGSNR's setting, under client-level DP",), "disagrees",
            measure="train loss"),
    Finding("With many clients the noise is smaller and DP leaves FedAvg learning: at Case 2's SVM over 1,000 clients, "
            "100 a round, FedAvg ends 0.4, 1.3 and 7.9 points below its 93.6% without DP at ε = 8, 4 and 1 (93.2%, "
            "92.3% and 85.7%).",
            (f"{MANY_SETTING[0].upper()}{MANY_SETTING[1:]}, DP at ε",), "agrees"),
    Finding("There, without DP, FedAdam reaches 92% 1.45 times sooner than FedAvg (11.9 against 17.3 rounds), with a "
            "lower training loss averaged over the rounds.",
            _many("FedAdam (η_s 0.01)", None), "agrees"),
    Finding("Under DP its speed-up is gone: at ε = 8 and 4 we could not tell its rounds to 92% from FedAvg's (15.8 "
            "against 17.2, and 20.8 against 19.5),",
            _many("FedAdam (η_s 0.01)", 8, 4), "could not tell", measure="rounds to"),
    Finding("and its training loss averaged over the rounds is higher than FedAvg's (0.244 against 0.194 at ε = 8, "
            "0.314 against 0.230 at ε = 4); a likely cause, not tested here: Adam's per-coordinate normalisation enlarges the "
            "noise where the signal is small.",
            _many("FedAdam (η_s 0.01)", 8, 4), "disagrees", measure="train loss"),
    Finding("At ε = 1 no method reaches 92% within the 60 rounds, so we could not tell any method's rounds from "
            "FedAvg's;",
            _many("BHerd", 1) + _many("FedAdam (η_s 0.01)", 1) + _many("FedUMF", 1), "could not tell",
            measure="rounds to"),
    Finding("there FedAdam's and FedUMF's training losses averaged over the rounds are lower than FedAvg's (0.56 and "
            "0.70 against 0.79).",
            _many("FedAdam (η_s 0.01)", 1) + _many("FedUMF", 1), "agrees", measure="train loss"),
    Finding("FedUMF is slower than FedAvg in this setting, with and without DP: 21.5 against 17.3 rounds to 92% "
            "without DP, 24.0 against 17.2 at ε = 8 and 22.4 against 19.5 at ε = 4,",
            _many("FedUMF", None, 8, 4), "disagrees", measure="rounds to"),
    Finding("with a higher training loss averaged over the rounds without DP and at ε = 8 (0.188 against 0.174, "
            "0.202 against 0.194);",
            _many("FedUMF", None, 8), "disagrees", measure="train loss"),
    Finding("at ε = 4 we could not tell its training loss from FedAvg's.",
            _many("FedUMF", 4), "could not tell", measure="train loss"),
    Finding("BHerd (α = 0.5) slows FedAvg here: no run of it reaches 92% without DP or at ε = 8 and 4 (it ends at "
            "81% without DP, 77% under it), and its training loss averaged over the rounds is higher at every ε (0.280 against 0.174 without "
            "DP, 1.03 against 0.79 at ε = 1).",
            _many("BHerd", None, 8, 4) + (f"{_many('BHerd', 1)[0]}: lower train loss",), "disagrees"),
))

INTRO = """
Issue 48 asked whether an acceleration method's speed-up over FedAvg survives the noise a client-level privacy
guarantee costs. Four settings: three methods' own quick ones, where DP leaves every model near chance, and one with
many clients, where it does not (last below). BHerd's Case 2 at the field report's client η
0.0001 (squared-SVM, Fashion-MNIST even/odd, 5 clients, every client every round, 60 rounds), where FedAdam's
η_s (0.03) was chosen on tuning seeds: every arm runs without DP and under DP-FedAvg (`algorithm.dp`: uploads
clipped to S = 0.043, FedAvg's median upload norm in round 1 on tuning seed 100; Gaussian noise z·S on the sum;
z calibrated by dp-accounting's RDP accountant to ε = 8, 4 and 1 at δ = 1e-5 after the 60 rounds: z = 9.9, 17.9
and 62.7). And FedUMF's IID setting, the field report's (2NN with 100 hidden units, a Fashion-MNIST subset of
12,000, 20 clients, C = 0.1: 2 uploads a round, client η 0.05, momentum 0.5, weight decay 5e-4, 60 rounds; target
80%, which FedUMF reached 1.66× sooner than FedAvg there): FedUMF (α = 1) and FedAvg without DP and under the same
DP at S = 0.31 (FedAvg's median upload norm in round 1 on tuning seed 100), z = 2.50, 4.05 and 13.10 for the
same ε (fixed-size sampling of 2 of 20 clients). The experiment files (`experiments/privacy/quick/dp_case2.yaml`,
`dp_fedumf.yaml`) say what was fixed before any run of each: settings, S, seeds 1-10, and these claims; nothing
changed after the runs.

FedUMF is admitted: the clients it
authorises are FedAvg's fixed-size sample, and the update a client keeps stays on it until it is fused into the
client's next upload, which is clipped whole, so its guarantee is FedAvg's (docs/privacy.md). Both settings put
the noise on the mean of few uploads: its standard deviation per coordinate is z·S/5 against an update of norm at
most S over 785 coordinates at Case 2, and z·S/2 (0.39 at ε = 8) against at most 0.31 over 79,510 coordinates at
FedUMF's. These are the regimes the quick settings fix, not tuned private settings.

**A hole found by these runs, and which runs came after its fix.** In the first FedUMF runs under DP, a client's
local SGD overflowed from a noise-driven model and its non-finite upload reached the noised mean un-clipped (a
non-finite norm is never above S): outside the guarantee, and the model became non-finite. The DP mean now counts
a non-finite upload as zero, a rule that looks at no data (docs/privacy.md). FedUMF's 60 DP runs were then run
again with the grid, S and claims unchanged: none diverges now. FedGSNR's 60 DP runs (both methods) were run again
the next session, also unchanged: before the fix every one of them had diverged within 2 to 32 rounds, after it none
has a non-finite loss, and its training-loss rows, which no diverged run could give, are now judged. BHerd's and
FedAdam's runs had no non-finite value and are unchanged.

FedGSNR runs at its own quick setting (`experiments/privacy/quick/dp_fedgsnr.yaml`: Fashion-MNIST, 2NN of 100
units, 10 clients, NonBalance, client η 0.05, 20 local steps, 50 rounds, every client every round) against FedAvg,
without DP and under DP at the same ε, with its plan made private (`algorithm.dp.plan_clip`, docs/privacy.md):
the server releases noised means of the clipped g_k, second moments and step ratios, so a round is one Gaussian of
z/2 for the accountant and its z is twice FedAvg's at the same ε (FedAvg z = 9.0, 16.4 and 57.2; FedGSNR 18.0,
32.7 and 114.4). S = 0.93 (FedAvg's median round-1 upload norm), C_g = 1.05, C_s = 0.51 and n_max = 0.2 are the
medians of round 1 on tuning seed 100 (`scripts/dp_fedgsnr_clips.py`), fixed with the claims before the runs.
Under DP both weight the clients uniformly. With ten clients the noise on the mean is z·S/10 a coordinate (0.84 for
FedAvg at ε = 8) over 89,610 parameters, and every private model stays at chance. The private plan is itself mostly
noise: the noised mean step ratio n̄ fell to 0 or below in 263 of the 500 rounds of the ten seeds at ε = 8 (264 and
265 at ε = 4 and 1), giving every client with n_k > 0 the cap of 200 steps.

**Many clients** (`experiments/privacy/quick/dp_many.yaml`). The settings above put the noise on the mean of 2 to 10
uploads, which leaves no speed-up to keep. Here Case 2's data and squared-SVM are spread over 1,000 clients of 60
samples (each holding one of the two labels), 100 a round by fixed-size sampling, B = 10, E = 1 (6 local steps), 60
rounds; every arm the same. Fixed on tuning seed 100 alone, without DP, before any judged run: the client η 0.016,
FedAvg's lowest training loss averaged over the rounds among seven values from 0.0005 to 0.032; FedAdam's η_s 0.01,
its lowest among the field report's four at that η; BHerd's α = 0.5 and FedUMF's α = 1 (C = 0.1) as in their
reports; S = 0.19, FedAvg's median round-1 upload norm (0.186; `scripts/dp_clip.py` prints each method's); z = 2.50,
4.05 and 13.10 for ε = 8, 4 and 1 (60 rounds of 100 of 1,000 clients), the same z as FedUMF's setting above, whose q
is also 0.1. The noise on the mean is then z·S/100 a coordinate, 0.0048 at ε = 8, over 785 coordinates. FedUMF's
1,000 clients all train every round; its uploaders are the same fixed-size sample.

**How the runs were made.** On this project's 2-core CPU machine (torch 2.13.0, Python 3.11), with the seeds of
each arm stacked (the same per-seed numbers as unstacked runs): `fedaccel experiment
experiments/privacy/quick/dp_case2.yaml --stack-seeds --out runs/reproduce/privacy-quick/dp_case2` (120 runs,
48 minutes beside other work); the same for `dp_fedumf` (80 runs, 35 minutes beside other work) and
`dp_fedgsnr` (80 runs, 26 minutes beside other work; its 60 DP runs again after the fix, 31 minutes beside other
work) and `dp_many` (160 runs, 19 minutes beside other work); then `fedaccel reproduce privacy` packed the runs and
drew this report; without the first commands it runs the 440 cells one by one.

Verdicts come from the exact paired sign-flip test with Benjamini–Hochberg across this report's claims
(docs/statistics.md). Rows are in the direction the methods' authors would hope for; "disagrees" means the
evidence points the other way.
"""
