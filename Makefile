# Trinity: `make test` and `make repro` work on a fresh machine (they create .venv).
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
SHARED ?= ../shared
REFERENCE_GNMT := $(SHARED)/reference/gnmt-baechi/gnmt_forward.json.gz
STAMP := $(VENV)/.installed

.PHONY: install test test-all params repro bench bench-export search-table validate clean

$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --disable-pip-version-check -e '.[dev]'
	touch $(STAMP)

install: $(STAMP)

test: $(STAMP)  ## fast suite (slow end-to-end runs are skipped; see test-all)
	$(PY) -m pytest -q

test-all: $(STAMP)
	$(PY) -m pytest -q --runslow

# The pipeline (dvc.yaml): compose conf/ for $(EXPERIMENT) into its params.yaml, then `dvc repro` in
# its folder under one MLflow parent run. EXPERIMENT=default (~100 min; the checkout root's params.yaml,
# dvc.lock, results/, reports/), smoke (CI, minutes), paper (hours), or your own conf/experiment/<name>.yaml:
# each of those in experiments/<name>/.
EXPERIMENT ?= default
export PATH := $(abspath $(VENV))/bin:$(PATH)

params: $(STAMP)  ## compose conf/ into the experiment's params.yaml (dvc repro does not recompose)
	$(PY) -m trinity.stages.params experiment=$(EXPERIMENT)

repro: params  ## the main job: the default pipeline end to end (reports/, mlflow.db)
	$(PY) -m trinity.stages.tracked $(EXPERIMENT) -- dvc repro

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
