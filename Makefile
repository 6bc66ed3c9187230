# Trinity: `make test` and `make repro` work on a fresh machine (they create .venv).
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
SHARED ?= ../shared
REFERENCE_GNMT := $(SHARED)/reference/gnmt-baechi/gnmt_forward.json.gz
STAMP := $(VENV)/.installed

.PHONY: install test test-all test-slurm params estimate repro paper-slice paper-slice-check remote push pull bench bench-export \
	speed-model-check \
	search-table ablation ablation-gate ablation-explore anneal-calibration variety-graphs paper-graphs search-paper-models search-variety search-variety-previous search-variety-stretches search-variety-mode search-variety-explore search-variety-variant search-variety-budget100 search-fresh-variant search-fresh search-fresh-budget100 search-fresh-stretches search-default-cases search-default-cases-stretches search-default-knobs search-default-racing groups-hold-split search-default-portfolio search-default-block-prior search-default-budget search-hierarchical-budget search-regime-seeds search-regime-seeds-budget100 search-regime-basin search-default-three-racers search-default-five-racers search-default-racers-660 search-fresh-budget1200 search-leader-explore search-adapt-explore search-neighbour-moves leader-moves search-dev bounds learned-list-policy learned-list-table validate worker-semantics validation-fit-rules validation-transfer-terms validation-round-anchor validation-what-if validation-op-traces trace-completeness interference-check corun-drift step-start validation-fit-set validation-ready-order validation-sends validation-sends-fresh validation-requests validation-requests-fresh validation-retime-fresh validation-sync-fresh validation-sync-iv3-fresh validation-sync-anchor validation-gap validation-corun validation-rounds-refit validation-share-of-bytes validation-share-of-bytes-fresh families-repeat dp-compute-term wakeup-latency measurement-noise clean

$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --disable-pip-version-check -e '.[dev]'
	touch $(STAMP)

install: $(STAMP)

test: $(STAMP)  ## fast suite (slow end-to-end runs are skipped; see test-all), a test file to each of 2 workers
	$(PY) -m pytest -q -n 2 --dist loadfile --no-loadscope-reorder

test-all: $(STAMP)
	$(PY) -m pytest -q --runslow

test-slurm: $(STAMP)  ## the SLURM path end to end on a SLURM started here (installs slurm-wlm, munge; ~6 min)
	$(PY) -m pytest -q --runslow tests/test_slurm.py

# The pipeline (dvc.yaml): compose conf/ for $(EXPERIMENT) into its params.yaml, then `dvc repro` in
# its folder under one MLflow parent run. EXPERIMENT=default (~7 h here; the checkout root's params.yaml,
# dvc.lock, results/, reports/), smoke (CI, minutes), paper (hours), or your own conf/experiment/<name>.yaml:
# each of those in experiments/<name>/.
EXPERIMENT ?= default
export PATH := $(abspath $(VENV))/bin:$(PATH)

params: $(STAMP)  ## compose conf/ into the experiment's params.yaml (dvc repro does not recompose)
	$(PY) -m trinity.stages.params experiment=$(EXPERIMENT)

estimate: params  ## the experiment's wall time here and on SLURM, from costs measured here (cached in runs/estimate)
	$(PY) -m trinity.stages.estimate --experiment $(EXPERIMENT) --print-only --out reports/estimate_$(EXPERIMENT).json

# The paper experiment prints its estimate and asks first (YES=1 answers yes).
repro: params  ## the main job: the default pipeline end to end (reports/, mlflow.db)
	$(if $(filter paper,$(EXPERIMENT)),$(PY) -m trinity.stages.estimate --experiment paper $(if $(YES),--yes))
	$(PY) -m trinity.stages.tracked $(EXPERIMENT) -- dvc repro

MODEL ?= inception_v3
paper-slice: $(STAMP)  ## one model of the paper experiment through a SLURM and an MLflow server started here (hours)
	$(PY) -m trinity.slurm -- $(PY) benchmarks/paper_slice.py --model $(MODEL) --out reports/paper_slice.json

# The same path at a reduced budget (5 iterations, 20 imitation steps, small annealing budgets; ~15 min):
# checks the path and the estimate's per-job figures, not the slice's time.
SLICE_CHECK := $(foreach m,trinity trinity-warm hierarchical hierarchical-warm,--override ++methods.$(m).search.iterations=5) \
	$(foreach m,trinity-warm hierarchical-warm,--override ++methods.$(m).search.warm_start_steps=20) \
	--override ++methods.annealing.options.budget=200 --override ++methods.annealing-long.options.budget=2000
paper-slice-check: $(STAMP)
	$(PY) -m trinity.slurm -- $(PY) benchmarks/paper_slice.py --model tiny_cnn --out reports/paper_slice_check.json \
		$(SLICE_CHECK)

# Sharing outputs through DVC's remote `shared` (a folder beside the checkout unless `make remote URL=...`).
remote: $(STAMP)  ## make URL (s3://..., ssh://..., a folder) this checkout's DVC remote
	$(PY) -m trinity.share set $(URL)

push: $(STAMP)  ## dvc push, once the remote answers
	$(PY) -m trinity.share push

pull: $(STAMP)  ## dvc pull, once the remote answers
	$(PY) -m trinity.share pull

bench: $(STAMP)  ## benchmark figures (ratios measured in the same run); exports models into data/ first
	$(PY) benchmarks/bench_export.py --out data
	$(PY) benchmarks/bench_sim.py --reference-graph $(REFERENCE_GNMT)
	$(PY) benchmarks/bench_scale.py
	# a shell glob, expanded when this line runs (make's $$(wildcard) would be expanded before the export)
	$(PY) benchmarks/bench_search.py --reference-graph $(REFERENCE_GNMT) data/*_profiled.json.gz
	$(PY) benchmarks/bench_runtime.py
	$(PY) benchmarks/bench_pipeline.py
	$(PY) benchmarks/bench_data_parallel.py --seeds 3

bench-export: $(STAMP)  ## export and profile the paper's five models into data/ (several minutes)
	$(PY) benchmarks/bench_export.py --out data

search-table: $(STAMP)  ## Trinity and Hierarchical vs every placer (needs `make bench-export` first; ~40 min)
	$(PY) benchmarks/search_table.py $(REFERENCE_GNMT) $(wildcard data/inception_v3_profiled.json.gz data/gnmt_profiled.json.gz) \
		--csv reports/search_table.csv

ablation: $(STAMP)  ## Trinity from scratch, change by change, 5 seeds on 3 cases (needs `make repro`'s data/; resumes from its CSV; ~30 min)
	$(PY) benchmarks/search_ablation.py --seeds 5 --csv reports/search_ablation.csv \
		--case data/inception_v3/profile/graph.json.gz:p100x2 --case data/inception_v3/profile/graph.json.gz:p100x4 \
		--case $(REFERENCE_GNMT):p100x4

# Graphs the benchmarks below export and profile here, outside the pipeline: their P100 costs (the roofline's)
# are the pipeline's exactly, their CPU-measured costs, and so the op features the searches compute, are not.
# $(call exported,NAME,EXPORT ARGUMENTS[,PROFILE ARGUMENTS]) makes data/exported/NAME.json.gz once.
exported = test -f data/exported/$(1).json.gz || ($(VENV)/bin/trinity export $(2) --out data/exported/$(1).raw.json.gz && \
	$(VENV)/bin/trinity profile data/exported/$(1).raw.json.gz $(3) --out data/exported/$(1).json.gz)

# The self-imitation gate on the policy's own likeliest devices against the default's gate on the elite, in one
# run (rows 7 and 13 of benchmarks/search_ablation.py), on InceptionV3 and GNMT; ~8 min.
ablation-gate: $(STAMP)  ## self-imitation's gate, elite vs mode, 5 seeds on 3 cases, one run (reports/search_gate.csv)
	$(call exported,inception_v3,inception_v3)
	$(PY) benchmarks/search_ablation.py --only 7,13 --seeds 5 --csv reports/search_gate.csv \
		--case data/exported/inception_v3.json.gz:p100x2 --case data/exported/inception_v3.json.gz:p100x4 \
		--case $(REFERENCE_GNMT):p100x4

# What lets a settled policy climb, on top of gate mode (rows 13-18 of benchmarks/search_ablation.py): free logit
# tables at their own rate, 8 units explored per sample, both, and the second try; then groups from METIS parts on
# top of both (today's default); the same cases as ablation-gate; ~12 min.
ablation-explore: $(STAMP)  ## free logit tables and exploration on top of gate mode, and METIS groups on the default, 5 seeds on 3 cases (reports/search_explore.csv)
	$(call exported,inception_v3,inception_v3)
	$(PY) benchmarks/search_ablation.py --only 13,14,15,16,17,18 --seeds 5 --csv reports/search_explore.csv \
		--case data/exported/inception_v3.json.gz:p100x2 --case data/exported/inception_v3.json.gz:p100x4 \
		--case $(REFERENCE_GNMT):p100x4

anneal-calibration: $(STAMP)  ## how cold calibrated annealing starts: accept_start on 4 graph families, 2 budgets (needs `make repro`'s data/; ~17 min)
	$(PY) benchmarks/anneal_calibration.py --csv reports/anneal_calibration.csv

bounds: $(STAMP)  ## room left: a lower bound counting communication per op-placement case (needs `make repro`'s data/; ~6 min)
	$(PY) benchmarks/bounds.py --time-limit 60 --nodes 40 --csv results/bounds.csv

# The held-out graphs: the synthetic ones of benchmarks/search_variety.py, then NMT 2-layer on 12 steps (the
# pipeline's nmt_2layer_s12), a transformer LM (8 blocks, width 512) and a ResNet (18 blocks, width 64-256).
VARIETY_GRAPHS := data/exported/nmt_2layer_s12.json.gz data/exported/transformer_lm_8x512.json.gz \
	data/exported/resnet_18x256.json.gz
RESNET_WIDTHS := widths=[64,128,256]
variety-graphs: $(STAMP)
	$(call exported,nmt_2layer_s12,nmt_2layer --batch 16 --option seq_len=12)
	$(call exported,transformer_lm_8x512,transformer_lm --batch 32 --option n_layers=8 --option d_model=512 \
		--option d_ff=2048 --option seq_len=128 --option n_heads=8,--steps 3)
	$(call exported,resnet_18x256,resnet_small --batch 128 --option blocks_per_stage=6 --option '$(RESNET_WIDTHS)',--steps 3)

search-variety: variety-graphs  ## Trinity from scratch vs m-ETF and annealing on graphs of other families than its development graphs (~28 min)
	$(PY) benchmarks/search_variety.py --csv reports/search_variety.csv $(VARIETY_GRAPHS)

# The paper's three models no search here had run on (its Table 3; InceptionV3 and NMT are the pipeline's), held out
# from every choice of today's default: PNASNet-5-Large and NASNet-Large (batch 8, 32x32 images) and GNMT (batch 64),
# exported and profiled here. Today's default (five racers, 660 iterations) on each, 2 and 4 P100s, 2 seeds.
paper-graphs: $(STAMP)
	$(call exported,pnasnet_large,pnasnet_large)
	$(call exported,nasnet_large,nasnet_large)
	$(call exported,gnmt,gnmt)

search-paper-models: paper-graphs  ## today's default on the paper's three models it never saw, vs the placers and annealing (~75 min)
	for m in pnasnet_large nasnet_large gnmt; do $(PY) benchmarks/search_variety.py --files-only \
	  --csv reports/search_paper_models_$$m.csv --iterations 660 --search '{$(FIVE_RACE_660)}' \
	  data/exported/$$m.json.gz || exit 1; done

# The budget every table before 300 iterations and two racers ran at (100 iterations, one search), for the
# search_default_cases.py loop (BUDGET_100) and for search_variety.py (BUDGET_100_ARGS)
BUDGET_100 = {"iterations": 100, "racers": 1}
BUDGET_100_ARGS = --iterations 100 --search '{"racers": 1}'
search-variety-budget100: variety-graphs  ## the same at the default's previous budget: 100 iterations, one search (~10 min)
	$(PY) benchmarks/search_variety.py --csv reports/search_variety_budget100.csv $(BUDGET_100_ARGS) $(VARIETY_GRAPHS)

# Earlier defaults, spelled out so each means the same whatever the defaults are (the README's held-out
# comparison): groups that start as stretches of levels (128 of them, prior 1), the default until METIS parts; on
# top of them, the default before the free logit tables and exploration (self-imitation gated on the elite), and
# that with gate `mode`. STRETCHES is the inside of an agent JSON object, its policy block left open.
STRETCHES = "num_groups": 128, "policy": {"locality_order": "breadth", "topo_prior": 1.0
STRETCHES_AGENT = {$(STRETCHES)}}
PREVIOUS_AGENT = {"self_imitation_gate": "elite", "explore": 0, $(STRETCHES), "unit_logits": false, "group_logits": false}}
search-variety-stretches: variety-graphs  ## the same with the default until METIS groups: stretches of levels (~13 min)
	$(PY) benchmarks/search_variety.py --csv reports/search_variety_stretches.csv --agent '$(STRETCHES_AGENT)' \
		$(BUDGET_100_ARGS) $(VARIETY_GRAPHS)

search-variety-previous: variety-graphs  ## the same with the default before the free tables and exploration (~13 min)
	$(PY) benchmarks/search_variety.py --csv reports/search_variety_previous.csv --agent '$(PREVIOUS_AGENT)' \
		$(BUDGET_100_ARGS) $(VARIETY_GRAPHS)

search-variety-mode: variety-graphs  ## that default with self-imitation gated on the policy's own likeliest devices (~13 min)
	$(PY) benchmarks/search_variety.py --csv reports/search_variety_mode.csv \
		--agent '{"self_imitation_gate": "mode", "explore": 0, $(STRETCHES), "unit_logits": false, "group_logits": false}}' \
		$(BUDGET_100_ARGS) $(VARIETY_GRAPHS)

# One variant (VARIANT, merged over Trinity's options; SEARCH, the loop's settings) on the graphs of other families,
# or on the fresh ones: reports/search_{variety,fresh}_NAME*.csv. Committed: NAME=groups32 VARIANT='{"num_groups": 32}',
# groups128 (variety), table_lr0.05 VARIANT='{"table_lr": 0.05}' (both): the knobs of `make search-default-knobs`;
# NAME=racers2 SEARCH='{"racers": 2}' (both): `make search-default-racing`'s race; NAME=relabel VARIANT='{"relabel": true}' (both).
# Those ran at the previous budget: ITERATIONS=100 and SEARCH's racers 1 where it names none (e.g.
# NAME=groups32 ITERATIONS=100 SEARCH='{"racers": 1}' VARIANT=...). Today's default: ITERATIONS=300, 2 racers.
VARIANT ?= {}
SEARCH ?= {}
ITERATIONS ?= 300
search-variety-variant: variety-graphs  ## Trinity with VARIANT's options on the graphs of other families (~28 min)
	$(PY) benchmarks/search_variety.py --csv reports/search_variety_$(NAME).csv --agent '$(VARIANT)' --search '$(SEARCH)' \
		--iterations $(ITERATIONS) $(VARIETY_GRAPHS)

search-fresh-variant: $(STAMP)  ## the same on the fresh synthetic graphs (~20 min)
	$(PY) benchmarks/search_variety.py --fresh --csv reports/search_fresh_$(NAME).csv --agent '$(VARIANT)' --search '$(SEARCH)' \
		--iterations $(ITERATIONS)

# Held out from the choice of METIS groups: synthetic graphs of sizes and seeds no table had used (training graphs of
# 3,200 and 5,000 ops, a layered DAG of 4,000), with today's default and with stretches of levels
search-fresh: $(STAMP)  ## Trinity from scratch vs m-ETF and annealing on fresh synthetic graphs (~20 min)
	$(PY) benchmarks/search_variety.py --fresh --csv reports/search_fresh.csv

search-fresh-budget100: $(STAMP)  ## the same at the default's previous budget: 100 iterations, one search (~8 min)
	$(PY) benchmarks/search_variety.py --fresh --csv reports/search_fresh_budget100.csv $(BUDGET_100_ARGS)

search-fresh-stretches: $(STAMP)  ## the same with the default until METIS groups: stretches of levels (~10 min)
	$(PY) benchmarks/search_variety.py --fresh --csv reports/search_fresh_stretches.csv --agent '$(STRETCHES_AGENT)' \
		$(BUDGET_100_ARGS)

# A Trinity variant (AGENT, merged over its options) on the default experiment's own cases, beside the committed
# runs (needs `make repro`'s data/ and results/; with no AGENT it reproduces them)
AGENT ?= {}
CSV ?= reports/search_default_cases.csv
search-default-cases: params  ## Trinity from scratch with AGENT's options on the default experiment's cases (~4 min)
	$(PY) benchmarks/search_default_cases.py --agent '$(AGENT)' --csv $(CSV)

search-default-cases-stretches: params  ## the same with the default until METIS groups: stretches of levels (~4 min)
	$(PY) benchmarks/search_default_cases.py --agent '$(STRETCHES_AGENT)' --csv reports/search_default_cases_stretches.csv \
	  --loop '$(BUDGET_100)'

# One knob at a time on the default cases (the regime's seeds split between two basins: is any knob's effect
# larger than the seeds'?)
search-default-knobs: params  ## Trinity from scratch, one knob changed at a time, on the default experiment's cases (~25 min)
	$(PY) benchmarks/search_default_cases.py --csv reports/search_default_knobs.csv --loop '$(BUDGET_100)' \
	  --variant 'default={}' --variant 'budget x2={"iterations": 200}' --variant 'lr 0.03={"lr": 0.03}' \
	  --variant 'table_lr 0.03={"table_lr": 0.03}' --variant 'table_lr 0.05={"table_lr": 0.05}' \
	  --variant '32 groups={"num_groups": 32}' --variant '128 groups={"num_groups": 128}'

# Two seeds racing inside one search (trinity/rl/racing.py), the budget shared: does it spend the regime's coin?
search-default-racing: params  ## Trinity from scratch with 2 racers, on the default experiment's cases (~4 min)
	$(PY) benchmarks/search_default_cases.py --csv reports/search_default_racing.csv --loop '$(BUDGET_100)' \
	  --variant 'racers 2={"racers": 2}' --variant 'racers 2 share 0.66={"racers": 2, "race_share": 0.66}'

# Today's budget against the previous one on the default cases: 300 iterations as one search, and as two racers
# (the default); the committed columns are the pipeline's runs
search-default-budget: params  ## Trinity from scratch at 300 iterations, one search and two racers, on the default cases (~14 min)
	$(PY) benchmarks/search_default_cases.py --csv reports/search_default_budget.csv \
	  --variant '300, one search={"iterations": 300, "racers": 1}' --variant '300, two racers={"iterations": 300, "racers": 2}'

# Why the searches gather: METIS's balanced split read through the parts the groups start as
groups-hold-split: params  ## METIS's split mapped onto the 64 parts of a k-way partition and of a recursive bisection (~1 min)
	$(PY) benchmarks/groups_hold_split.py --csv reports/groups_hold_split.csv

# A portfolio of priors on the default cases: racers whose groups start from different locality orders (README's
# *A portfolio of priors*); the committed columns are the pipeline's runs
search-default-portfolio: params  ## Trinity from scratch with racers of different priors, on the default cases (~33 min)
	$(PY) benchmarks/search_default_cases.py --csv reports/search_default_portfolio.csv \
	  --variant 'bisection={"race_agents": [], "policy": {"locality_order": "bisection"}}' \
	  --variant 'metis+bisection={"race_agents": [{}, {"policy": {"locality_order": "bisection"}}]}' \
	  --variant 'metis+breadth={"race_agents": [{}, {"policy": {"locality_order": "breadth"}}]}' \
	  --variant 'metis+breadth+bisection={"racers": 3, "race_agents": [{}, {"policy": {"locality_order": "breadth"}}, {"policy": {"locality_order": "bisection"}}]}' \
	  --variant 'metis+metis+breadth={"racers": 3, "race_agents": [{}, {}, {"policy": {"locality_order": "breadth"}}]}'

# Groups from a recursive bisection with the block prior on devices: samples start on the bisection's own
# balanced split (README's *The block prior on bisection groups*); default rows are this run's, not the pipeline's
BISECTION_BLOCK = "race_agents": [], "policy": {"locality_order": "bisection", "block_prior"
search-default-block-prior: params  ## bisection groups + block prior (3, 1, 3 fading, 3 learned) against the default, on the default cases (~63 min)
	$(PY) benchmarks/search_default_cases.py --only 'inception_v3 p100x2' --csv reports/search_default_block_prior_p100x2.csv \
	  --variant 'default={}' --variant 'metis+bisection-block3={"race_agents": [{}, {"policy": {"locality_order": "bisection", "block_prior": 3}}]}' \
	  --variant 'bisection-block3={$(BISECTION_BLOCK): 3}}'
	$(PY) benchmarks/search_default_cases.py --only p100x4 --csv reports/search_default_block_prior_p100x4.csv \
	  --variant 'default={}' --variant 'bisection-block3={$(BISECTION_BLOCK): 3}}'
	$(PY) benchmarks/search_default_cases.py --only 'inception_v3 p100' --csv reports/search_default_block_prior1.csv \
	  --variant 'bisection-block1={$(BISECTION_BLOCK): 1}}'
	$(PY) benchmarks/search_default_cases.py --only 'inception_v3 p100' --csv reports/search_default_block_prior_fade.csv \
	  --variant 'bisection-block3-fade120={$(BISECTION_BLOCK): 3, "block_prior_steps": 120}}' \
	  --variant 'metis+bisection-block3-fade120={"race_agents": [{}, {"policy": {"locality_order": "bisection", "block_prior": 3, "block_prior_steps": 120}}]}'
	$(PY) benchmarks/search_default_cases.py --only 'inception_v3 p100' --csv reports/search_default_block_prior_learned.csv \
	  --variant 'bisection-block3-learned={$(BISECTION_BLOCK): 3, "block_prior_learned": true}}'

# Hierarchical from scratch at Trinity's 300 iterations (the default experiment gives it 100): equal budgets
search-hierarchical-budget: params  ## Hierarchical from scratch at 300 iterations on the default cases (~15 min)
	$(PY) benchmarks/hierarchical_budget.py --iterations 300 --csv reports/search_hierarchical_budget300.csv

# The regime's coin on 20 seeds (its 5-seed mean has a standard error of ~15 ms): how often a seed settles slow
search-regime-seeds: params  ## Trinity from scratch in the paper's regime, seeds 0-19 (~8 min)
	$(PY) benchmarks/search_default_cases.py --csv reports/search_regime_seeds20.csv --only regime --seeds 20

search-regime-seeds-budget100: params  ## the same at the previous budget: 100 iterations, one search (~3 min)
	$(PY) benchmarks/search_default_cases.py --csv reports/search_regime_seeds20_budget100.csv --only regime --seeds 20 \
	  --loop '$(BUDGET_100)'

# the default's block-moves racer (conf/experiment/default.yaml's race_agents[1] and [2])
BLOCK_RACER = {"block_moves": 0.25, "op_costs": "cluster", "policy": {"locality_order": "bisection"}}
# Where the regime's Trinity ends (README's *How deep is the regime's basin?*): a longer leader, finer exploration,
# finer block-racer groups, more block racers; then every committed regime strategy scored by the regime's MDPE
# reward, and annealing from each Trinity strategy and from METIS's
search-regime-basin: params  ## the regime's basin: eight variants (~30 min), then the rescoring and annealing (~2 min)
	$(PY) benchmarks/search_default_cases.py --csv reports/search_regime_basin_variants.csv --only regime \
	  --variant 'long500={"iterations": 500, "race_share": 0.48}' --variant 'ex2={"explore": 2}' \
	  --variant 'ex4={"explore": 4}' --variant 'bm128={"race_agents": [{}, {"block_moves": 0.25, "op_costs": "cluster", "num_groups": 128, "policy": {"locality_order": "bisection"}}]}' \
	  --variant 'r3={"racers": 3, "race_agents": [{}, $(BLOCK_RACER), $(BLOCK_RACER)]}' \
	  --variant 'r4={"racers": 4, "race_agents": [{}, $(BLOCK_RACER), $(BLOCK_RACER), $(BLOCK_RACER)]}' \
	  --variant 'r3 500 same race=$(THREE_RACERS_500)' \
	  --variant 'r3 500={"iterations": 500, "racers": 3, "race_agents": [{}, $(BLOCK_RACER), $(BLOCK_RACER)]}'
	$(PY) benchmarks/regime_rescore.py

# Today's default (conf/experiment/default.yaml's methods.trinity.search since stop 66): a second block racer and
# 500 iterations, the race as long as before (240 iterations, now 80 a racer), on every default case beside the
# experiment's committed runs, then on the fresh synthetic graphs and the variety graphs (README's *How deep is the
# regime's basin?*)
THREE_AGENTS = "racers": 3, "race_agents": [{}, $(BLOCK_RACER), $(BLOCK_RACER)]
THREE_RACE = "race_share": 0.48, $(THREE_AGENTS)
THREE_RACERS = {$(THREE_RACE)}
THREE_RACERS_500 = {"iterations": 500, $(THREE_RACE)}
search-default-three-racers: params  ## today's default on the default cases (~20 min), the fresh (~55) and variety graphs (~90)
	$(PY) benchmarks/search_default_cases.py --csv reports/search_default_three_racers_500.csv \
	  --variant 'r3 500=$(THREE_RACERS_500)'
	$(MAKE) search-fresh-variant NAME=three_racers_500 ITERATIONS=500 \
	  SEARCH='$(THREE_RACERS)'
	$(MAKE) search-variety-variant NAME=three_racers_500 ITERATIONS=500 \
	  SEARCH='$(THREE_RACERS)'

# Tried at stop 67, not adopted: four block racers beside the METIS one, the same race and budget (240
# race iterations, now 48 a racer; the leader 260), against today's default in the same run, per default case; then
# the regime's Hierarchical from scratch rerun, as its search_regime jobs run it; then on the fresh synthetic graphs,
# today's default rerun beside it (README's *More draws of the basin*)
FIVE_AGENTS = "racers": 5, "race_agents": [{}, $(BLOCK_RACER), $(BLOCK_RACER), $(BLOCK_RACER), $(BLOCK_RACER)]
FIVE_RACE = "race_share": 0.48, $(FIVE_AGENTS)
FIVE_RACERS_500 = {"iterations": 500, $(FIVE_RACE)}
# the regime's Hierarchical from scratch, rerun beside the candidate (outside DVC)
FIVE_OUT := out/five_racers
FIVE_HYDRA := -cd . -cn params hydra.run.dir=. hydra.output_subdir=null hydra/job_logging=stdout \
	mlflow.uri=sqlite:///$(FIVE_OUT)/mlflow.db
search-default-five-racers: params  ## the candidate and today's default on the default cases (~25 min), the fresh graphs (~2 x 30)
	$(PY) benchmarks/search_default_cases.py --only 'inception_v3 p100' --csv reports/search_default_five_racers_inception_v3.csv \
	  --variant 'r3 500=$(THREE_RACERS_500)' --variant 'r5 500=$(FIVE_RACERS_500)'
	$(PY) benchmarks/search_default_cases.py --only layered12 --csv reports/search_default_five_racers_layered12.csv \
	  --variant 'r3 500=$(THREE_RACERS_500)' --variant 'r5 500=$(FIVE_RACERS_500)'
	$(PY) benchmarks/search_default_cases.py --only regime --csv reports/search_default_five_racers_regime.csv \
	  --variant 'r3 500=$(THREE_RACERS_500)' --variant 'r5 500=$(FIVE_RACERS_500)'
	mkdir -p $(FIVE_OUT)
	for s in 0 1 2 3 4; do $(PY) pipeline/search.py $(FIVE_HYDRA) job.model=inception_v3_paper job.cluster=p100x4 \
	  job.method=hierarchical job.seed=$$s paths.results=$(FIVE_OUT) reward.comm_tolerance_GB=0.5 \
	  reward.memory_tolerance_GB=2.0 || exit 1; done
	$(PY) -c "import json, pathlib, pandas as pd; pd.DataFrame([json.loads(f.read_text()) for f in \
	  sorted(pathlib.Path('$(FIVE_OUT)/search/inception_v3_paper').glob('*.metrics.json'))]).to_csv(\
	  'reports/search_default_five_racers_regime_hierarchical.csv', index=False)"
	$(MAKE) search-fresh-variant NAME=five_racers_500 ITERATIONS=500 SEARCH='{$(FIVE_RACE)}'
	$(MAKE) search-fresh-variant NAME=three_racers_500_rerun ITERATIONS=500 SEARCH='$(THREE_RACERS)'

# Five racers at full length (stop 67; today's default since stop 68): every racer its 80 race iterations (five
# racers: 400, the leader 260; 660 in all, 1.3x the budget) against the three racers of stop 66's default at the same
# 660 (the leader 420), per default case; then five racers on the fresh synthetic graphs and the variety graphs
# (README's *Five racers at full length*)
R3_660 = {"iterations": 660, "race_share": 0.364, $(THREE_AGENTS)}
FIVE_RACE_660 = "race_share": 0.606, $(FIVE_AGENTS)
R5_660 = {"iterations": 660, $(FIVE_RACE_660)}
search-default-racers-660: params  ## five racers at 80 iterations each against three at 660 (~35 min), the fresh (~35) and variety graphs (~45)
	$(PY) benchmarks/search_default_cases.py --only regime --csv reports/search_default_racers_660_regime.csv \
	  --variant 'r3 660=$(R3_660)' --variant 'r5 660=$(R5_660)'
	$(PY) benchmarks/search_default_cases.py --only 'inception_v3 p100' --csv reports/search_default_racers_660_inception_v3.csv \
	  --variant 'r3 660=$(R3_660)' --variant 'r5 660=$(R5_660)'
	$(PY) benchmarks/search_default_cases.py --only layered12 --csv reports/search_default_racers_660_layered12.csv \
	  --variant 'r3 660=$(R3_660)' --variant 'r5 660=$(R5_660)'
	$(MAKE) search-fresh-variant NAME=five_racers_660 ITERATIONS=660 SEARCH='{$(FIVE_RACE_660)}'
	$(MAKE) search-variety-variant NAME=five_racers_660 ITERATIONS=660 SEARCH='{$(FIVE_RACE_660)}'

# The one held-out case today's default misses on stop 68's machine (the fresh layered4000 on 4 devices, 1.024x m-ETF):
# the same race with the leader given 800 iterations instead of 260 (1,200 in all; README's *Five racers at full length*)
search-fresh-budget1200: $(STAMP)  ## today's default at 1,200 iterations on the fresh layered4000, p100x4 (~10 min)
	$(PY) benchmarks/search_variety.py --fresh --only 'layered4000x6000 (4000 ops) p100x4' --iterations 1200 \
	  --search '{"race_share": 0.3334, $(FIVE_AGENTS)}' --csv reports/search_fresh_five_racers_1200_layered4000.csv

# The leader's moves: today's default with the race's winner sampling 2 units off its likeliest devices instead of 8
# once it runs alone (agent.leader_explore; README's *The leader's moves*), on the fresh synthetic graphs
search-leader-explore: $(STAMP)  ## today's default, the leader exploring 2 units, on the fresh graphs (~25 min)
	$(MAKE) search-fresh-variant NAME=five_racers_660_leader2 ITERATIONS=660 VARIANT='{"leader_explore": 2}' \
	  SEARCH='{$(FIVE_RACE_660)}'

# The units explored following the search's success (agent.adapt_explore, Rechenberg's 1/5 rule; README's *The
# leader's moves*): today's default with it, on the fresh and the variety graphs
search-adapt-explore: $(STAMP)  ## today's default with adapt_explore on the fresh (~30 min) and variety graphs (~40)
	$(MAKE) search-fresh-variant NAME=five_racers_660_adapt ITERATIONS=660 VARIANT='{"adapt_explore": true}' \
	  SEARCH='{$(FIVE_RACE_660)}'
	$(MAKE) search-variety-variant NAME=five_racers_660_adapt ITERATIONS=660 VARIANT='{"adapt_explore": true}' \
	  SEARCH='{$(FIVE_RACE_660)}'

# Neighbour moves (agent.neighbour_moves; README's *Neighbour moves*): a quarter of every racer's samples given one of
# simulated annealing's moves along the graph's edges, on top of today's default, on the fresh and the variety graphs
search-neighbour-moves: $(STAMP)  ## today's default with neighbour moves on the fresh (~30 min) and variety graphs (~40)
	$(MAKE) search-fresh-variant NAME=five_racers_660_neighbour ITERATIONS=660 VARIANT='{"neighbour_moves": 0.25}' \
	  SEARCH='{$(FIVE_RACE_660)}'
	$(MAKE) search-variety-variant NAME=five_racers_660_neighbour ITERATIONS=660 VARIANT='{"neighbour_moves": 0.25}' \
	  SEARCH='{$(FIVE_RACE_660)}'

# Racing in rounds (SearchConfig.race_rounds; README's *Racing in rounds*): today's default race as two rounds of
# successive halving (five racers 40 turns each, the best three 66 more, the best of those leads), on the fresh graphs
# (the variety graphs: the same SEARCH with search-variety-variant)
search-race-rounds: $(STAMP)  ## today's default raced in two rounds on the fresh graphs (~30 min)
	$(MAKE) search-fresh-variant NAME=five_racers_660_rounds2 ITERATIONS=660 SEARCH='{$(FIVE_RACE_660), "race_rounds": 2}'

# How well the race picks its leader: on each fresh case, seed 0, today's default race rerun with every other racer made
# the leader (README's *Racing in rounds*)
race-oracle: $(STAMP)  ## the race's pick against each racer leading instead, fresh graphs, seed 0 (~30 min)
	$(PY) benchmarks/race_oracle.py --seeds 0 --csv reports/race_oracle.csv --iterations 660 --search '{$(FIVE_RACE_660)}'

leader-moves: $(STAMP)  ## how a settled search spends its iterations: one block racer, 8 and 2 units explored, 3 fresh graphs (~4 min)
	$(PY) benchmarks/leader_moves.py --csv reports/leader_moves.csv

search-dev: $(STAMP)  ## the graphs the default's settings were chosen on, and the searches' state there (reports/search_dev*.csv; ~10 min)
	$(PY) benchmarks/search_dev.py --csv reports/search_dev.csv --trace reports/search_dev_trace.csv

# Other rates for the free tables and other exploration than the default's (0.1, 8 units), on stretches of levels
# (as when they were tried), e.g. TABLE_LR=0.3 EXPLORE=3 (the second try) or TABLE_LR=0.1 EXPLORE=24 (the first):
# search_variety_explore_lr<TABLE_LR>_x<EXPLORE>.csv
search-variety-explore: variety-graphs  ## the same with TABLE_LR and EXPLORE (both required) (~13 min)
	$(if $(and $(TABLE_LR),$(EXPLORE)),,$(error set TABLE_LR and EXPLORE, e.g. make search-variety-explore TABLE_LR=0.3 EXPLORE=3))
	$(PY) benchmarks/search_variety.py --csv reports/search_variety_explore_lr$(TABLE_LR)_x$(EXPLORE).csv \
		--agent '{"table_lr": $(TABLE_LR), "explore": $(EXPLORE), $(STRETCHES)}}' $(BUDGET_100_ARGS) $(VARIETY_GRAPHS)

learned-list-policy: $(STAMP)  ## pre-train learned-list's committed zero-shot policy on the project's synthetic graphs (~10 min)
	$(PY) benchmarks/learned_list_train.py --out trinity/rl/pretrained/learned-list.pt

# learned-list-table (what the README's tables are; ~10 min on 2 cores): zero-shot and a 10-iteration
# fine-tune (beside annealing at its wall time) on every held-out graph, 2 and 4 devices; the
# search at 50 iterations and its ablation on three graphs, p100x4. LEARNED_LIST_LONG=1 (~3 h before the decode sped up):
# the search at the default budget (100 iterations) on every held-out graph as well, and the ablation at 100.
LEARNED_LIST_LONG ?=
learned-list-table: $(STAMP)  ## learned-list on held-out graphs: zero-shot and fine-tuned vs m-ETF and annealing; search and ablation on 3 graphs (~10 min)
	$(PY) benchmarks/learned_list_generalise.py $(wildcard data/inception_v3/profile/graph.json.gz) $(REFERENCE_GNMT) \
		$(if $(LEARNED_LIST_LONG),--full) --csv reports/learned_list_generalisation.csv
	$(PY) benchmarks/learned_list_generalise.py --only 0,3 $(REFERENCE_GNMT) --clusters p100x4 --full --ablation \
		--iterations $(if $(LEARNED_LIST_LONG),100,50) --csv reports/learned_list_search.csv

# the simulator's control edges between workers and ready order against the rules before them, on 4 fresh
# calibrations (2 models x 2 batches) with held-out and annealed strategies (benchmarks/worker_semantics.py)
worker-semantics: $(STAMP)  ## the two worker terms of the simulator, on fresh calibrations (~15 min)
	$(PY) benchmarks/worker_semantics.py

# every real run of the families comparison a second time, beside the committed one: the measurements' noise
# (benchmarks/families_repeat.py; needs the partition stage's plans, the layer and the whole-step profiles)
families-repeat: $(STAMP)  ## the families' real runs again: spread between two runs of one plan (~13 min)
	$(PY) benchmarks/families_repeat.py

# the data-parallel cost model's computation term against a whole step timed alone and co-running, and what the
# committed runs would be predicted at with it (benchmarks/dp_compute_term.py; needs the layer profiles)
dp-compute-term: $(STAMP)  ## a whole training step against the layer profile's sum, as a what-if (~10 s)
	$(PY) benchmarks/dp_compute_term.py

# a gloo round trip when its thread's core is shared with busy processes, as a local cluster's ranks share
# theirs (benchmarks/wakeup_latency.py)
wakeup-latency: $(STAMP)  ## small-message round trips beside 0, 1, 2 busy processes on the core (~1 min)
	$(PY) benchmarks/wakeup_latency.py

# the roofline speed model against a GPU: needs one (exit 2 without); a second run's summaries beside the first's
speed-model-check: $(STAMP)  ## the GPU cost model per op and per step against CUDA-event times (~1 min on a GPU)
	$(PY) benchmarks/speed_model_check.py --runs 2 --out reports/speed_model_check

# a committed validation's held-out split strategies measured again in many rounds: the steps of a session
# against its sessions, the first round and the first step on fresh workers (benchmarks/measurement_noise.py)
measurement-noise: $(STAMP)  ## where measured step times vary, at 1 and 2 warm-up steps (~10 min, quiet machine)
	$(PY) benchmarks/measurement_noise.py

# how the calibration fits its transfer model (objective, link streams tried, worker terms), each rule refitted
# to each run's calibration measurements (and, as a what-if, to the validation's own rows of the calibration set), simulating
# the held-out strategies the pipeline's validate stage measured (needs its results/validate/ outputs; ~3 min)
validation-fit-rules: $(STAMP)  ## the calibration's fit rules against each other on the committed validation
	$(PY) -m trinity.runtime.resimulate results/validate/inception_v3 results/validate/nmt_2layer_s12 \
		--refit calibration --csv reports/validation_fit_rules.csv
	$(PY) -m trinity.runtime.resimulate results/validate/inception_v3 results/validate/nmt_2layer_s12 \
		--refit validation --csv reports/validation_fit_rules_validation.csv

# today's fit rule under settings of two transfer terms the calibration lacks (cluster terms latency_overlaps,
# transfer_cpu_us), each refitted to each run's calibration measurements, on the committed validation (~35 min)
validation-transfer-terms: $(STAMP)  ## the calibration's fit with overlapping latencies and a fixed cost per transfer
	$(PY) benchmarks/validation_transfer_terms.py

validation-round-anchor: $(STAMP)  ## the committed validation with and without its op times anchored to its own rounds
	$(PY) -m trinity.runtime.resimulate results/validate/inception_v3 results/validate/nmt_2layer_s12 \
		--unanchored --csv reports/validation_round_anchor.csv

validation-ready-order: $(STAMP)  ## the committed validation refitted under each ready order: would fitting the order help?
	$(PY) benchmarks/validation_ready_order.py

validation-sends: $(STAMP)  ## the committed validation refitted with and without the workers' held sends (~5 min)
	$(PY) benchmarks/validation_sends.py

validation-requests: $(STAMP)  ## the committed validation refitted with and without the cost of issuing a request (~6 min)
	$(PY) benchmarks/validation_requests.py

# A fresh validation, outside DVC, as the validate stage runs it: $(1) its folder (emptied first), $(2) the search
# stage's results/search it validates, $(3) the model, $(4) more Hydra overrides, $(5) where its summary is copied
# (none: not copied)
define fresh_validation
	rm -rf $(1) && mkdir -p $(1)/reports $(1)/runs && ln -s $(2) $(1)/search
	$(PY) pipeline/validate.py -cd . -cn params hydra.run.dir=$(1)/hydra hydra.output_subdir=null \
		hydra/job_logging=stdout job.model=$(3) paths.results=$(1) paths.reports=$(1)/reports \
		paths.runs=$(1)/runs mlflow.uri=sqlite:///$(CURDIR)/$(1)/mlflow.db $(4)
	$(if $(5),cp $(1)/validate/$(3).summary.json $(5))
endef

# Both calibrations of a fresh InceptionV3 validation of the committed searches (results/search: `dvc repro` or
# `dvc pull` them first), outside DVC, then refitted with and without the request cost
REQUESTS_FRESH := runs/validation_requests_fresh
validation-requests-fresh: $(STAMP)  ## a fresh InceptionV3 validation (two calibrations), refitted with and without the request cost (~95 min, quiet machine)
	$(call fresh_validation,$(REQUESTS_FRESH),$(CURDIR)/results/search,inception_v3,,reports/validation_requests_fresh_summary.json)
	$(PY) benchmarks/validation_requests.py $(REQUESTS_FRESH)/validate/inception_v3 \
		--csv reports/validation_requests_fresh.csv

RETIME_FRESH := runs/validation_retime_fresh
SEARCHES ?= $(CURDIR)/results/search
validation-retime-fresh: $(STAMP)  ## a fresh InceptionV3 validation (two calibrations), disturbed runs timed again as the default experiment does (~100 min, quiet job)
	$(call fresh_validation,$(RETIME_FRESH),$(SEARCHES),inception_v3,,reports/validation_retime_fresh_summary.json)

SYNC_FRESH := runs/validation_sync_fresh
validation-sync-fresh: $(STAMP)  ## a fresh NMT validation (two calibrations), outside DVC, read with and without the two-worker anchor (~60 min, quiet job)
	test -f data/nmt_2layer_s12/profile/graph.json.gz || PATH=$(VENV)/bin:$$PATH dvc repro -s profile@nmt_2layer_s12
	$(call fresh_validation,$(SYNC_FRESH),$(CURDIR)/results/search,nmt_2layer_s12,,reports/validation_sync_fresh_summary.json)
	cp $(SYNC_FRESH)/validate/nmt_2layer_s12/calibration/calibration.json reports/validation_sync_fresh_calibration_run1.json
	cp $(SYNC_FRESH)/validate/nmt_2layer_s12/run2/calibration/calibration.json reports/validation_sync_fresh_calibration_run2.json

SYNC_IV3_FRESH := runs/validation_sync_iv3_fresh
validation-sync-iv3-fresh: $(STAMP)  ## a fresh InceptionV3 validation (one calibration) with the two-worker anchor on, outside DVC (~50 min, quiet job; SEARCHES= as validation-retime-fresh)
	$(call fresh_validation,$(SYNC_IV3_FRESH),$(SEARCHES),inception_v3,validation.runs=1,reports/validation_sync_iv3_fresh_summary.json)
	cp $(SYNC_IV3_FRESH)/validate/inception_v3/results.csv reports/validation_sync_iv3_fresh_b64.csv

validation-sync-anchor: $(STAMP)  ## fresh validations with and without a step over both workers anchored to each part's rounds (~1 min; validation-requests-fresh, -retime-fresh, -sync-fresh, -sync-iv3-fresh and `dvc repro validate@nmt_2layer_s12` first)
	$(PY) -m trinity.runtime.resimulate $(REQUESTS_FRESH)/validate/inception_v3 $(RETIME_FRESH)/validate/inception_v3 \
		$(SYNC_FRESH)/validate/nmt_2layer_s12 $(SYNC_IV3_FRESH)/validate/inception_v3 results/validate/nmt_2layer_s12 --synced \
		--csv reports/validation_sync_anchor.csv

validation-gap: $(STAMP)  ## the held-out splits' gap to the simulator per part, a fixed and a per-tensor cost, of the two fresh validations (seconds; validation-requests-fresh and validation-retime-fresh first)
	$(PY) benchmarks/validation_gap.py $(RETIME_FRESH)/validate/inception_v3 $(REQUESTS_FRESH)/validate/inception_v3 \
		--csv reports/validation_gap.csv

FRESH := runs/validation_fresh
validation-sends-fresh: $(STAMP)  ## a fresh InceptionV3 validation (one calibration, outside DVC), refitted and what-if with and without held sends (~41 min, quiet machine)
	$(call fresh_validation,$(FRESH),$(CURDIR)/results/search,inception_v3,validation.runs=1,)
	$(PY) benchmarks/validation_sends.py $(FRESH)/validate/inception_v3 --csv reports/validation_sends_fresh.csv
	$(PY) benchmarks/validation_what_if.py $(FRESH)/validate/inception_v3 --csv reports/validation_what_if_fresh.csv
	$(PY) benchmarks/validation_fit_set.py results/validate/inception_v3 $(FRESH)/validate/inception_v3 --held-sends \
		--csv reports/validation_fit_set_held_sends.csv
	$(PY) benchmarks/validation_fit_set.py $(FRESH)/validate/inception_v3 --csv reports/validation_fit_set_fresh.csv

validation-what-if: $(STAMP)  ## the committed validation with each simulator term of the calibrated cluster set otherwise
	$(PY) benchmarks/validation_what_if.py

# Traced real steps of six committed InceptionV3 strategies on 2 local workers, each worker's ops beside the
# simulator's schedule (the graph's GraphDef from the pipeline's export stage); needs a quiet machine
validation-op-traces: params  ## where a split's real step goes: traced real steps per worker and their held sends beside the simulator's (~3 min)
	PATH=$(CURDIR)/$(VENV)/bin:$$PATH dvc repro export@inception_v3
	$(PY) benchmarks/validation_op_traces.py --csv reports/validation_op_traces.csv --sends-csv reports/validation_send_delays.csv

trace-completeness: params  ## how often a traced step loses the records of what crossed, and what pooling traced steps reads (~5 min)
	PATH=$(CURDIR)/$(VENV)/bin:$$PATH dvc repro export@inception_v3
	$(PY) benchmarks/trace_completeness.py --csv reports/trace_completeness.csv

corun-drift: params  ## does the co-running slowdown follow a split's step over the one-worker step, round by round? (~12 min)
	PATH=$(CURDIR)/$(VENV)/bin:$$PATH dvc repro export@inception_v3
	$(PY) benchmarks/corun_drift.py --csv reports/corun_drift.csv

interference-check: params  ## does a measurement see another job on its cores? quiet runs against a busy loop on a worker's core (~3 min)
	PATH=$(CURDIR)/$(VENV)/bin:$$PATH dvc repro export@inception_v3
	$(PY) benchmarks/interference_check.py --csv reports/interference_check.csv

step-start: params  ## when each worker starts its part of an untraced step, InceptionV3 at batch 64 and 8 (~10 min)
	PATH=$(CURDIR)/$(VENV)/bin:$$PATH dvc repro export@inception_v3
	d=$$(mktemp -d) && $(VENV)/bin/trinity export inception_v3 --batch 8 --out $$d/graph.json.gz \
	  && $(PY) benchmarks/step_start.py --graph data/inception_v3/export/graph.json.gz --graph $$d/graph.json.gz \
	  --csv reports/step_start.csv; rc=$$?; rm -rf $$d; exit $$rc

validation-fit-set: $(STAMP)  ## the transfer model fitted with half the held-out splits, judged on the rest (~3 min)
	$(PY) benchmarks/validation_fit_set.py results/validate/inception_v3 --csv reports/validation_fit_set.csv

# the co-running slowdown fitted with the transfer model or as measured (calibrate.FITTED_CORUN_SLOWDOWNS), on fresh
# validations outside DVC (under out/): InceptionV3 at batch 64 on validation-rounds' 14 held-out splits (one run,
# ~15 min), InceptionV3 through the validate stage with strategies of its own, batches 64 and 8 (one run, ~40 min),
# and NMT through the validate stage (2 runs, batches 16 and 8, ~45 min); each run refitted to its own calibration
CORUN_OUT := out/validate_corun
CORUN_HYDRA := -cd . -cn params hydra.run.dir=. hydra.output_subdir=null hydra/job_logging=stdout \
	mlflow.uri=sqlite:///$(CORUN_OUT)/mlflow.db
validation-corun: params  ## the co-running slowdown fitted or measured, on fresh validations (~100 min, quiet machine)
	mkdir -p $(CORUN_OUT)
	for m in inception_v3 nmt_2layer_s12; do test -d data/$$m/profile || { $(PY) pipeline/export.py $(CORUN_HYDRA) \
		job.model=$$m && $(PY) pipeline/profile.py $(CORUN_HYDRA) job.model=$$m; } || exit 1; done
	$(VENV)/bin/trinity validate data/inception_v3/export/graph.json.gz reports/validation_rounds_strategies/*.json.gz \
		--placers single --rounds 5 --steps 2 --warmup 2 --out $(CORUN_OUT)/inception_v3_rounds --no-mlflow
	$(PY) pipeline/validate.py $(CORUN_HYDRA) job.model=inception_v3 'run.models=[layered12]' validation.runs=1 \
		paths.results=$(CORUN_OUT)/own
	$(PY) pipeline/validate.py $(CORUN_HYDRA) job.model=nmt_2layer_s12 paths.results=$(CORUN_OUT)/own
	$(PY) -m trinity.runtime.resimulate $(CORUN_OUT)/inception_v3_rounds $(CORUN_OUT)/own/validate/inception_v3 \
		$(CORUN_OUT)/own/validate/nmt_2layer_s12 --refit calibration --csv reports/validation_corun.csv

# the transfer model refitted to the fit set's rows of each run's rounds (`validation.refit_to_rounds`) against the
# calibration's own fit, at every batch of the run, and each cluster term set otherwise (validation_what_if.py):
# validation-corun's stage validations (InceptionV3, NMT x2) and two more fresh InceptionV3 ones (on
# strategies the stage places itself, through today's calibration: the co-running slowdown fitted; ~35 min each)
REFIT_OUT := out/validate_refit
validation-rounds-refit: params  ## the transfer model refitted to the rounds or the calibration's (~70 min)
	test -f $(CORUN_OUT)/own/validate/nmt_2layer_s12/results.csv || $(MAKE) validation-corun
	for d in own own2; do test -f $(REFIT_OUT)/$$d/validate/inception_v3/batch8/results.csv || \
		$(PY) pipeline/validate.py $(CORUN_HYDRA) job.model=inception_v3 'run.models=[layered12]' validation.runs=1 \
		paths.results=$(REFIT_OUT)/$$d || exit 1; done
	$(PY) -m trinity.runtime.resimulate $(CORUN_OUT)/own/validate/inception_v3 $(REFIT_OUT)/own/validate/inception_v3 \
		$(REFIT_OUT)/own2/validate/inception_v3 $(CORUN_OUT)/own/validate/nmt_2layer_s12 --rounds-refit \
		--csv reports/validation_rounds_refit.csv
	$(PY) benchmarks/validation_what_if.py $(CORUN_OUT)/own/validate/inception_v3 $(REFIT_OUT)/own/validate/inception_v3 \
		$(REFIT_OUT)/own2/validate/inception_v3 $(CORUN_OUT)/own/validate/nmt_2layer_s12 \
		--csv reports/validation_what_if_fresh.csv

# The calibration's fit as it was (CPU shares of the whole transfer) against shares of the bytes alone, the
# latency waited out on the wire, with and without a receiver's share, refitted to each run's calibration
# (nothing held out fitted) on validation-rounds-refit's four fresh validations
TODAY_RULE := mean-streams-control-lifo-latency-measured-arrivals-last-corun-fitted
validation-share-of-bytes: params  ## CPU shares of a transfer's bytes against its whole time (~7 min)
	test -f $(REFIT_OUT)/own2/validate/inception_v3/batch8/results.csv || $(MAKE) validation-rounds-refit
	$(PY) -m trinity.runtime.resimulate $(CORUN_OUT)/own/validate/inception_v3 $(REFIT_OUT)/own/validate/inception_v3 \
		$(REFIT_OUT)/own2/validate/inception_v3 $(CORUN_OUT)/own/validate/nmt_2layer_s12 --refit calibration \
		--rules $(TODAY_RULE) $(TODAY_RULE)-bytes $(TODAY_RULE)-bytes-receive --csv reports/validation_share_of_bytes.csv

# The same three rules on fresh validations through today's calibration (the shares of the bytes and the receiver's
# share fitted), none of whose measurements chose the model: InceptionV3 with its own strategies (one run, batches
# 64 and 8, ~30 min) and NMT (two runs, batches 16 and 8, ~55 min); quiet machine
BYTES_OUT := out/validate_bytes
validation-share-of-bytes-fresh: params  ## the same on fresh validations through today's calibration (~90 min)
	test -f $(BYTES_OUT)/validate/inception_v3/batch8/results.csv || $(PY) pipeline/validate.py $(CORUN_HYDRA) \
		job.model=inception_v3 'run.models=[layered12]' validation.runs=1 paths.results=$(BYTES_OUT) || exit 1
	test -f $(BYTES_OUT)/validate/nmt_2layer_s12/run2/batch8/results.csv || $(PY) pipeline/validate.py \
		$(CORUN_HYDRA) job.model=nmt_2layer_s12 paths.results=$(BYTES_OUT) || exit 1
	$(PY) -m trinity.runtime.resimulate $(BYTES_OUT)/validate/inception_v3 $(BYTES_OUT)/validate/nmt_2layer_s12 \
		--refit calibration --rules $(TODAY_RULE) $(TODAY_RULE)-bytes $(TODAY_RULE)-bytes-receive \
		--csv reports/validation_share_of_bytes_fresh.csv

VALIDATION_PLACERS := single metis m-etf m-sct m-topo expert round-robin

validate: $(STAMP)  ## simulator vs real runs on 2 local TF workers, InceptionV3 and NMT (~30 min)
	test -f data/inception_v3.json.gz || $(VENV)/bin/trinity export inception_v3 --out data/inception_v3.json.gz
	test -f data/nmt_2layer_b16.json.gz || $(VENV)/bin/trinity export nmt_2layer --batch 16 --out data/nmt_2layer_b16.json.gz
	$(VENV)/bin/trinity validate data/inception_v3.json.gz --placers $(VALIDATION_PLACERS) --search-samples 13 \
		--rounds 2 --steps 3 --out reports/validation/inception_v3
	$(VENV)/bin/trinity validate data/nmt_2layer_b16.json.gz --placers $(VALIDATION_PLACERS) --search-samples 13 \
		--rounds 2 --steps 2 --profile-steps 5 --out reports/validation/nmt_2layer_b16
	$(PY) benchmarks/parallel_vs_single.py data/inception_v3.json.gz reports/validation/inception_v3
	$(PY) benchmarks/parallel_vs_single.py data/nmt_2layer_b16.json.gz reports/validation/nmt_2layer_b16

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache reports
