#!/usr/bin/python3
"""Checks the Grafana dashboard and the Prometheus rules against each other.

  check_dashboard.py           check; exits 1 listing every problem found
  check_dashboard.py --write   regenerate queries.txt and alert_queries.txt

queries.txt holds every distinct PromQL expression of the dashboard panels
(template variables replaced by match-all regexes, e.g. namespace=~".*") and
of the recording rules, one per line, whitespace collapsed. Each should return
data from a Prometheus that scrapes both services under traffic and loads
rules/lookahead.rules.yml. alert_queries.txt holds the alert expressions, which
are empty while all is well. Both files are generated, never edited: a
dashboard or rule change without --write fails this check.

Checks:
  * the dashboard is valid JSON with a Prometheus datasource variable, and
    every panel and every target uses it (type prometheus, uid ${datasource});
  * every metric selector of a panel carries the template matchers of its
    service: namespace, model and instance for verifysvc series, namespace and
    draft_instance for draftsvc series (draftsvc has no model label);
  * every metric name is one the services export (METRICS below, from the
    metrics contract) or a recording rule, and a recording rule only uses
    recording rules evaluated before it;
  * queries.txt and alert_queries.txt equal what the dashboard and the rules
    give; with promtool on PATH, every query also parses (Prometheus' own
    parser, via `promtool check rules` on a scratch rule file).
"""

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile

import yaml

HERE = os.path.dirname(os.path.abspath(__file__))
DASHBOARD = os.path.join(HERE, "lookahead.json")
RULES = os.path.join(HERE, "rules", "lookahead.rules.yml")
QUERIES = os.path.join(HERE, "queries.txt")
ALERT_QUERIES = os.path.join(HERE, "alert_queries.txt")

DATASOURCE = {"type": "prometheus", "uid": "${datasource}"}

# Series each service exports (histograms by base name). Keep in step with
# the services' metric definitions.
_VERIFYSVC_COUNTERS = [
    "lookahead_requests_total", "lookahead_request_success_total",
    "lookahead_prompt_tokens_total", "lookahead_generation_tokens_total",
    "lookahead_decoding_steps_total", "lookahead_spec_decode_num_drafts_total",
    "lookahead_spec_decode_num_draft_tokens_total",
    "lookahead_spec_decode_num_accepted_tokens_total",
    "lookahead_spec_decode_num_accepted_tokens_per_pos_total",
    "lookahead_spec_decode_num_draft_tokens_per_source_total",
    "lookahead_spec_decode_num_accepted_tokens_per_source_total",
    "lookahead_cost_gate_steps_total",
    "lookahead_draft_rpc_failures_total",
    "lookahead_plain_equivalent_seconds_total",
    "lookahead_decode_seconds_total",
    "lookahead_assistant_seconds_total",
    "lookahead_assistant_passes_total",
    "lookahead_prefix_cache_lookup_tokens_total",
    "lookahead_prefix_cache_hit_tokens_total",
    "lookahead_prefix_cache_evictions_total",
]
_VERIFYSVC_GAUGES = [
    "lookahead_num_requests_running", "lookahead_num_requests_waiting",
    "lookahead_kv_cache_tokens", "lookahead_kv_cache_capacity_tokens",
    "lookahead_draftsvc_up", "lookahead_prefix_cache_bytes",
    "lookahead_prefix_cache_capacity_bytes", "lookahead_step_cost_seconds",
]
_VERIFYSVC_HISTOGRAMS = [
    "lookahead_accepted_tokens_per_step", "lookahead_step_duration_seconds",
    "lookahead_forward_duration_seconds",
    "lookahead_draft_rpc_duration_seconds", "lookahead_batch_sequences",
    "lookahead_time_to_first_token_seconds",
    "lookahead_request_tokens_per_second",
]
_DRAFTSVC_COUNTERS = [
    "lookahead_trie_inserted_tokens_total", "lookahead_trie_prunes_total",
    "lookahead_store_write_errors_total", "lookahead_store_recoveries_total",
    "lookahead_draft_sessions_expired_total",
]
_DRAFTSVC_GAUGES = [
    "lookahead_draft_sessions", "lookahead_trie_nodes",
    "lookahead_trie_capacity_nodes", "lookahead_store_disk_bytes",
    "lookahead_store_pending_batches", "lookahead_store_rebuild_seconds",
    "lookahead_store_degraded", "lookahead_store_unpersisted_mutations",
    "lookahead_store_wal_dropped_records", "lookahead_store_wal_dropped_bytes",
]
_DRAFTSVC_HISTOGRAMS = ["lookahead_draft_retrieval_duration_seconds"]


def _histogram_series(names):
    return [n + s for n in names for s in ("_bucket", "_sum", "_count")]


# metric name -> service ("verifysvc" or "draftsvc").
METRICS = {}
for _name in (_VERIFYSVC_COUNTERS + _VERIFYSVC_GAUGES +
              _histogram_series(_VERIFYSVC_HISTOGRAMS)):
    METRICS[_name] = "verifysvc"
for _name in (_DRAFTSVC_COUNTERS + _DRAFTSVC_GAUGES +
              _histogram_series(_DRAFTSVC_HISTOGRAMS)):
    METRICS[_name] = "draftsvc"

# The matchers every panel selector of a service must carry.
REQUIRED_MATCHERS = {
    "verifysvc": {"namespace": "$namespace", "model": "$model",
                  "instance": "$instance"},
    "draftsvc": {"namespace": "$namespace", "instance": "$draft_instance"},
}
TEMPLATE_VARIABLES = ("namespace", "model", "instance", "draft_instance")
MATCH_ALL = ".*"

_TOKEN = re.compile(r"""
    (?P<string>"(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*')
  | (?P<matchers>\{(?:[^}"]|"(?:[^"\\]|\\.)*")*\})
  | (?P<range>\[[^\]]*\])
  | (?P<number>\d+(?:\.\d+)?(?:[eE][+-]?\d+)?)
  | (?P<ident>[A-Za-z_:][A-Za-z0-9_:]*)
  | (?P<space>\s+)
  | (?P<other>.)
""", re.VERBOSE)
_MATCHER = re.compile(r'([A-Za-z_][A-Za-z0-9_]*)\s*(=~|!~|!=|=)\s*"((?:[^"\\]|\\.)*)"')
# Keywords followed by a parenthesized label list, not a sub-expression.
_LABEL_LIST_KEYWORDS = {"by", "without", "on", "ignoring", "group_left",
                        "group_right"}
_KEYWORDS = _LABEL_LIST_KEYWORDS | {"bool", "and", "or", "unless", "offset",
                                    "inf", "nan"}
# Aggregations may put "by (...)" between their name and their argument.
_AGGREGATIONS = {"sum", "min", "max", "avg", "group", "stddev", "stdvar",
                 "count", "count_values", "bottomk", "topk", "quantile"}
_VARIABLE = re.compile(r"\$\{([A-Za-z_]\w*)\}|\[\[([A-Za-z_]\w*)\]\]|\$([A-Za-z_]\w*)")


def normalize(expr):
    """One line, runs of whitespace collapsed: the form stored in the lists."""
    return re.sub(r"\s+", " ", expr).strip()


def substitute_variables(expr):
    """Replaces the dashboard's template variables by match-all regexes.

    Returns (expr, unknown variable names)."""
    unknown = []

    def replace(m):
        name = m.group(1) or m.group(2) or m.group(3)
        if name in TEMPLATE_VARIABLES:
            return MATCH_ALL
        unknown.append(name)
        return m.group(0)

    return _VARIABLE.sub(replace, expr), unknown


def selectors(expr):
    """Yields (metric name, {label: (op, value)} or None) per metric selector.

    A small scanner, not a parser: it knows strings, {matchers}, [ranges],
    function calls and label lists (by/on/... (labels)), which is all the
    PromQL this dashboard uses. Yields (None, matchers) for a bare {...}."""
    tokens = [(m.lastgroup, m.group()) for m in _TOKEN.finditer(expr)
              if m.lastgroup != "space"]
    i = 0
    while i < len(tokens):
        kind, text = tokens[i]
        following = tokens[i + 1] if i + 1 < len(tokens) else (None, None)
        if kind == "ident" and text in _LABEL_LIST_KEYWORDS and following[1] == "(":
            while i < len(tokens) and tokens[i][1] != ")":
                i += 1
        elif kind == "ident" and text in _KEYWORDS:
            pass
        elif kind == "ident" and (following[1] == "(" or text in _AGGREGATIONS):
            pass  # a function or aggregation
        elif kind == "ident":
            matchers = None
            if following[0] == "matchers":
                matchers = {m[0]: (m[1], m[2]) for m in _MATCHER.findall(following[1])}
                i += 1
            yield text, matchers
        elif kind == "matchers":
            yield None, {m[0]: (m[1], m[2]) for m in _MATCHER.findall(text)}
        i += 1


def load_rules(problems):
    """Returns [(group, rule)] in evaluation order."""
    with open(RULES) as f:
        doc = yaml.safe_load(f)
    out = []
    for group in doc.get("groups", []):
        for rule in group.get("rules", []):
            if not isinstance(rule.get("expr"), str) or not rule["expr"].strip():
                problems.append(f"rules: group {group['name']}: a rule without expr")
                continue
            out.append((group["name"], rule))
    return out


def service_of(name, matchers, recorded):
    """The service whose series `name` selects, or None if unknown."""
    if name == "up":
        job = (matchers or {}).get("job")
        return job[1] if job and job[0] == "=" and job[1] in REQUIRED_MATCHERS else None
    if name in METRICS:
        return METRICS[name]
    return recorded.get(name)


def check_rules(rules, problems):
    """Checks metric names and rule order; returns {record name: service}."""
    recorded = {}  # record name -> service, in evaluation order
    for group, rule in rules:
        where = f"rules: {rule.get('record') or rule.get('alert')}"
        if _VARIABLE.search(rule["expr"]):
            problems.append(f"{where}: template variable in a rule expr")
        services = set()
        for name, matchers in selectors(rule["expr"]):
            if name is None:
                problems.append(f"{where}: selector without a metric name")
                continue
            service = service_of(name, matchers, recorded)
            if service is None:
                problems.append(
                    f"{where}: unknown metric {name} (a typo, a recording rule "
                    "evaluated after this one, or up without job=\"verifysvc|draftsvc\")")
            else:
                services.add(service)
        if "record" in rule:
            if rule["record"] in recorded:
                problems.append(f"{where}: recorded twice")
            if "verifysvc" in group:
                recorded[rule["record"]] = "verifysvc"
            elif "draftsvc" in group:
                recorded[rule["record"]] = "draftsvc"
            else:
                problems.append(f"{where}: recording group {group} names no service")
            if len(services) > 1:
                problems.append(f"{where}: mixes verifysvc and draftsvc series")
    return recorded


def panels_of(dashboard):
    """All panels, those inside (collapsed) rows included."""
    for panel in dashboard.get("panels", []):
        yield panel
        yield from panel.get("panels", [])


def check_templating(dashboard, problems):
    variables = {v.get("name"): v for v in dashboard.get("templating", {}).get("list", [])}
    ds = variables.get("datasource")
    if not ds or ds.get("type") != "datasource" or ds.get("query") != "prometheus":
        problems.append("dashboard: needs a variable datasource of type datasource, query prometheus")
    for name in TEMPLATE_VARIABLES:
        v = variables.get(name)
        if not v:
            problems.append(f"dashboard: template variable {name} missing")
            continue
        query = v.get("query")
        query = query.get("query") if isinstance(query, dict) else query
        if v.get("type") != "query" or not str(query).startswith("label_values("):
            problems.append(f"dashboard: variable {name} must be a label_values query")
        if v.get("datasource") != DATASOURCE:
            problems.append(f"dashboard: variable {name} must use datasource {DATASOURCE}")
        if not v.get("includeAll") or v.get("allValue") != MATCH_ALL:
            problems.append(f"dashboard: variable {name} needs includeAll with allValue {MATCH_ALL!r}")


def check_dashboard(dashboard, recorded, problems):
    """Returns the panels' exprs with variables substituted, normalized."""
    if not isinstance(dashboard.get("schemaVersion"), int) or dashboard["schemaVersion"] < 36:
        problems.append("dashboard: schemaVersion must be an integer >= 36")
    check_templating(dashboard, problems)
    exprs = []
    ids = set()
    for panel in panels_of(dashboard):
        where = f"panel {panel.get('id')} {panel.get('title')!r}"
        if panel.get("id") in ids:
            problems.append(f"{where}: duplicate panel id")
        ids.add(panel.get("id"))
        if panel.get("type") == "row":
            continue
        if panel.get("datasource") != DATASOURCE:
            problems.append(f"{where}: datasource must be {DATASOURCE}")
        targets = panel.get("targets") or []
        if not targets:
            problems.append(f"{where}: no targets")
        ref_ids = [t.get("refId") for t in targets]
        if len(set(ref_ids)) != len(ref_ids):
            problems.append(f"{where}: duplicate refId")
        for target in targets:
            twhere = f"{where} target {target.get('refId')}"
            if target.get("datasource") != DATASOURCE:
                problems.append(f"{twhere}: datasource must be {DATASOURCE}")
            expr = target.get("expr", "")
            if not expr.strip():
                problems.append(f"{twhere}: empty expr")
                continue
            check_panel_selectors(twhere, expr, recorded, problems)
            substituted, unknown = substitute_variables(expr)
            for name in unknown:
                problems.append(f"{twhere}: unknown variable ${name} (use fixed [5m] windows)")
            exprs.append(normalize(substituted))
    return exprs


def check_panel_selectors(where, expr, recorded, problems):
    for name, matchers in selectors(expr):
        service = service_of(name, matchers, recorded) if name else None
        if service is None:
            problems.append(f"{where}: unknown metric {name} in {expr!r}")
            continue
        for label, value in REQUIRED_MATCHERS[service].items():
            if (matchers or {}).get(label) != ("=~", value):
                problems.append(
                    f"{where}: {name} needs {label}=~\"{value}\" ({service} series)")


def promtool_parse(queries, problems):
    """Parses every query with Prometheus' parser; False if promtool is absent."""
    promtool = shutil.which("promtool")
    if not promtool:
        return False
    rules = {"groups": [{"name": "parse", "rules": [
        {"record": f"check:query:{i}", "expr": q} for i, q in enumerate(queries)]}]}
    with tempfile.NamedTemporaryFile("w", suffix=".yml") as f:
        yaml.safe_dump(rules, f)
        f.flush()
        run = subprocess.run([promtool, "check", "rules", f.name],
                             capture_output=True, text=True)
    if run.returncode != 0:
        problems.append("promtool cannot parse a query:\n" + run.stdout + run.stderr)
    return True


def read_lines(path):
    if not os.path.exists(path):
        return None
    with open(path) as f:
        return [line.rstrip("\n") for line in f]


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--write", action="store_true",
                        help="regenerate queries.txt and alert_queries.txt")
    args = parser.parse_args()

    problems = []
    try:
        with open(DASHBOARD) as f:
            dashboard = json.load(f)
    except (OSError, ValueError) as e:
        print(f"FAIL: {DASHBOARD}: {e}")
        return 1
    rules = load_rules(problems)
    recorded = check_rules(rules, problems)
    panel_exprs = check_dashboard(dashboard, recorded, problems)

    queries = sorted(set(panel_exprs) | {normalize(r["expr"]) for _, r in rules if "record" in r})
    alert_queries = sorted({normalize(r["expr"]) for _, r in rules if "alert" in r})
    parsed = promtool_parse(queries + alert_queries, problems)

    if args.write:
        for path, lines in ((QUERIES, queries), (ALERT_QUERIES, alert_queries)):
            with open(path, "w") as f:
                f.write("".join(line + "\n" for line in lines))
    else:
        for path, want in ((QUERIES, queries), (ALERT_QUERIES, alert_queries)):
            have = read_lines(path)
            if have is None:
                problems.append(f"{path} missing: run {sys.argv[0]} --write")
                continue
            for q in sorted(set(want) - set(have)):
                problems.append(f"{os.path.basename(path)} lacks: {q}")
            for q in sorted(set(have) - set(want)):
                problems.append(f"{os.path.basename(path)} has a stale line: {q}")
            if have != want and set(have) == set(want):
                problems.append(f"{os.path.basename(path)}: not sorted/deduplicated; run --write")

    for p in problems:
        print("FAIL:", p)
    if problems:
        return 1
    print(f"OK: {len(panel_exprs)} panel targets, {len(rules)} rules, "
          f"{len(queries)} queries, {len(alert_queries)} alert queries"
          + ("" if parsed else " (promtool not found: queries not parsed)"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
