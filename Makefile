# kcp-opa: every target installs what it needs into .venv, so a fresh machine
# with only Python >= 3.11 and make can run any of them.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
DEPLOY := fixtures/deployments
TRUST  := fixtures/trust/registry.yaml
# The demo's bundle signing key: generated on first use, git-ignored (a real one lives in CI's secret store).
SIGNING_KEY := .demo-keys/bundle-signing.pem
VERIFY      := --verification-key $(SIGNING_KEY).pub

.PHONY: sysdeps-postgres sysdeps-softhsm sysdeps-chromium help install docs demo serve-demo test policy-test lint typecheck bundle bench bench-replicas bench-quick fuzz clean mutate mutate-policies mutate-slice mutate-python mutate-controls

help: ## list the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk 'BEGIN {FS = ":.*## "}; {printf "  %-10s %s\n", $$1, $$2}'

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[dev]'
	@# The OPA reference engine (Go, via ctypes) for tests and auditors only;
	@# its metadata asks for Python 3.14 but the library runs on 3.11.
	$(BIN)/pip install --quiet --ignore-requires-python 'opa-golib-python-bindings>=0.4.4'
	@touch $(STAMP)

install: $(STAMP) ## create .venv with kcp-opa, dev tools and the OPA reference engine

docs: $(STAMP) ## regenerate the gate's evaluator union and docs/reference.md from the policies
	$(BIN)/kcp-opa generate --policies policies --reference docs/reference.md --format text

$(SIGNING_KEY): | $(STAMP)
	$(BIN)/kcp-opa bundle keygen $(SIGNING_KEY)

bundle: $(STAMP) $(SIGNING_KEY) ## validate, compile and sign the reference deployments into bundles/
	@for d in $(DEPLOY)/*/; do \
	  name=$$(basename $$d); \
	  $(BIN)/kcp-opa compile $$d/knowledge*.yaml --matrix $$d/matrix.yaml --trust $(TRUST) \
	    --policies policies --output bundles/$$name.tar.gz --signing-key $(SIGNING_KEY) --format text || exit $$?; \
	  $(BIN)/kcp-opa bundle verify bundles/$$name.tar.gz $(VERIFY) --format text || exit $$?; \
	done

demo: $(STAMP) $(SIGNING_KEY) ## the main job on the reference deployments: validate, compile, decide, audit (one line a step; details in audit/demo.log)
	@$(BIN)/python examples/demo.py --signing-key $(SIGNING_KEY) --trust $(TRUST) --deployments $(DEPLOY)

serve-demo: $(STAMP) ## the supplier payment through the MCP server (streamable HTTP), six registry principals
	@$(MAKE) --no-print-directory bundle >/dev/null
	@rm -f audit/serve-demo.jsonl
	KCP_OPA_VERIFICATION_KEY=$(SIGNING_KEY).pub $(BIN)/python examples/serve_demo.py
	$(BIN)/kcp-opa audit verify --format text audit/serve-demo.jsonl

PG_BINDIR = $(shell pg_config --bindir 2>/dev/null)

sysdeps-postgres: ## PostgreSQL 15's server binaries (Debian), for the -m postgres tests
	@test -x "$(PG_BINDIR)/initdb" || (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql-15 >/dev/null)

sysdeps-softhsm: ## SoftHSM2 (a PKCS#11 token) for the HSM signer's tests; installed only when missing
	@command -v softhsm2-util >/dev/null || (apt-get update -qq && apt-get install -y -qq softhsm2)

sysdeps-chromium: ## Debian's chromium and chromedriver for the browser tests (installed only when missing; root)
	@command -v chromium >/dev/null && test -x /usr/bin/chromedriver || \
	  (apt-get update -qq && apt-get install -y -qq chromium chromium-driver)

TEST_WORKERS ?= 4

test: $(STAMP) sysdeps-postgres sysdeps-softhsm sysdeps-chromium ## lint, type-check, the policy suite and the test suite (what CI runs)
	$(BIN)/ruff check kcp_opa tests bench examples
	$(BIN)/ruff format --check kcp_opa tests bench examples
	$(BIN)/mypy
	@$(MAKE) --no-print-directory mutate-slice
	# kcp-opa check policies --strict and kcp-opa test policies --coverage --threshold 90 run once
	# each, inside pytest (tests/authoring/test_shipped_policies_check.py and
	# tests/authoring/test_shipped_policies_tests.py, a file each so they start on their own workers).
	# Workers: most tests wait on subprocesses and sockets, so more workers than cores pays;
	# --dist loadfile keeps a file's module-scoped bundles and servers built once, on one worker.
	$(BIN)/pytest -n $(TEST_WORKERS) --dist loadfile

policy-test: $(STAMP) ## kcp-opa check + test on policies/ (Rego tests on both engines, decision cases, coverage)
	$(BIN)/kcp-opa check policies --strict --format text
	$(BIN)/kcp-opa test policies --coverage --threshold 90 --junit reports/kcp-opa-test.xml --format text

lint: $(STAMP) ## ruff only
	$(BIN)/ruff check kcp_opa tests bench examples
	$(BIN)/ruff format --check kcp_opa tests bench examples

typecheck: $(STAMP) ## mypy --strict only
	$(BIN)/mypy

MUTATION_RECORD = policies/mutation-score.json

mutate-slice: $(STAMP) ## the CI slice: 40 mutants stratified by file, checked against the full run's record (~2 min)
	$(BIN)/kcp-opa mutate policies --sample 40 --threshold 85 --score-file $(MUTATION_RECORD) --full-threshold 90 \
	  --junit reports/mutate-slice.xml --format text

mutate-policies: $(STAMP) ## every policy mutant, score >= 90%; records it in policies/mutation-score.json (commit it)
	$(BIN)/kcp-opa mutate policies --threshold 90 --score-file $(MUTATION_RECORD) \
	  --junit reports/mutate-policies.xml --format text

MUTMUT_CHILDREN ?= 2

mutate-python: $(STAMP) ## mutmut on the eight security-critical Python modules (setup.cfg [mutmut]; ~1 h on 2 cores)
	$(BIN)/pip install --quiet 'mutmut==3.8.1'
	rm -rf mutants
	nice $(BIN)/mutmut run --max-children $(MUTMUT_CHILDREN)
	$(BIN)/mutmut results

CONTROLS_RUN = build/mutmut-controls

mutate-controls: $(STAMP) ## mutmut on authorize/controls.py alone, with its own tests (tests/mutmut-controls.cfg; ~25 min)
	$(BIN)/pip install --quiet 'mutmut==3.8.1'
	rm -rf $(CONTROLS_RUN) && mkdir -p $(CONTROLS_RUN)
	git ls-files -z | xargs -0 cp --parents -t $(CONTROLS_RUN)
	cp tests/mutmut-controls.cfg $(CONTROLS_RUN)/setup.cfg
	cd $(CONTROLS_RUN) && nice $(CURDIR)/$(BIN)/mutmut run --max-children $(MUTMUT_CHILDREN)
	cd $(CONTROLS_RUN) && $(CURDIR)/$(BIN)/mutmut results

mutate: mutate-policies mutate-python mutate-controls ## every mutation run (not part of test)

bench: $(STAMP) ## every figure in docs/performance.md: the suite and the service -> bench/results*.json (not part of test; ~12 min on 2 cores)
	$(BIN)/python bench/suite.py
	$(BIN)/python bench/bench_service.py
	$(BIN)/python bench/bench_analysis.py

bench-replicas: $(STAMP) sysdeps-postgres ## decisions/s with 1, 2, 3 serve replicas on one PostgreSQL ledger -> bench/results-replicas.json (not part of test; ~5 min)
	$(BIN)/python bench/bench_replicas.py

bench-quick: $(STAMP) ## the suite without the 100,000-unit deployment and the service, fewer rounds (~4 min on 2 cores)
	$(BIN)/python bench/suite.py --quick

fuzz: $(STAMP) ## differential fuzzer, regopy vs OPA: >= 20,000 decisions over fixed seeds -> reports/fuzz-report.{json,md}
	$(BIN)/python tests/fuzz/run.py --decisions 20000 --report reports/fuzz-report

clean: ## remove the venv, build output and caches
	rm -rf $(VENV) bundles/*.tar.gz audit reports mutants .pytest_cache .mypy_cache .ruff_cache
