# Trinity: `make test` and `make repro` work on a fresh machine (they create .venv).
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
SHARED ?= ../shared
REFERENCE_GNMT := $(SHARED)/reference/gnmt-baechi/gnmt_forward.json.gz
STAMP := $(VENV)/.installed

.PHONY: install test test-all repro bench bench-export search-table validate clean

$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --disable-pip-version-check -e '.[dev]'
	touch $(STAMP)

install: $(STAMP)

test: $(STAMP)  ## fast suite (slow end-to-end runs are skipped; see test-all)
	$(PY) -m pytest -q

test-all: $(STAMP)
	$(PY) -m pytest -q --runslow

repro: $(STAMP)  ## the main job: every placer on the reference GNMT graph, 2 and 4 P100s
	mkdir -p reports
	$(VENV)/bin/trinity compare $(REFERENCE_GNMT) --cluster p100x2 p100x4 --csv reports/placers_gnmt_reference.csv \
		--plot reports/placers_gnmt_reference.png
	$(VENV)/bin/trinity place $(REFERENCE_GNMT) --cluster p100x4 --placer m-sct --out reports/m-sct_p100x4.json
	$(VENV)/bin/trinity simulate $(REFERENCE_GNMT) reports/m-sct_p100x4.json --cluster p100x4 \
		--gantt reports/m-sct_p100x4_gantt.png

bench: $(STAMP)  ## benchmark figures (ratios measured in the same run); exports models into data/ first
	$(PY) benchmarks/bench_export.py --out data
	$(PY) benchmarks/bench_sim.py --reference-graph $(REFERENCE_GNMT)
	$(PY) benchmarks/bench_search.py --reference-graph $(REFERENCE_GNMT) $(wildcard data/*_profiled.json.gz)
	$(PY) benchmarks/bench_runtime.py

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
