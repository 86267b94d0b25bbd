#!/usr/bin/python3
"""promtool on what deploy/prometheus ships: the configuration (with the rule files it loads),
every rule file, and the rules' unit tests (deploy/prometheus/tests/*_test.yml)."""

import glob
import os
import subprocess
import sys
import unittest

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
import deploy_lib as lib  # noqa: E402


def promtool(*args):
    return subprocess.run([lib.PROMTOOL, *args], cwd=lib.PROMETHEUS_DIR, capture_output=True,
                          text=True, timeout=120)


class PromtoolTest(unittest.TestCase):
    def check(self, *args):
        result = promtool(*args)
        self.assertEqual(result.returncode, 0,
                         f"promtool {' '.join(args)}:\n{result.stdout}{result.stderr}")
        return result

    def test_check_config(self):
        result = self.check("check", "config", "prometheus.yml")
        # The config loads at least one rule file, and it is the one the tests cover.
        self.assertIn("SUCCESS", result.stdout)
        self.assertTrue(lib.rule_files(), "prometheus.yml loads no rule files")

    def test_check_rules(self):
        files = lib.rule_files()
        self.assertTrue(files)
        self.check("check", "rules", *files)

    def test_rule_unit_tests(self):
        tests = sorted(glob.glob(os.path.join(lib.PROMETHEUS_DIR, "tests", "*_test.yml")))
        self.assertTrue(tests, "no rule unit tests in deploy/prometheus/tests")
        self.check("test", "rules", *tests)

    def test_every_alert_has_a_unit_test(self):
        covered = ""
        for path in glob.glob(os.path.join(lib.PROMETHEUS_DIR, "tests", "*_test.yml")):
            with open(path) as f:
                covered += f.read()
        for _, rule in lib.alert_rules():
            if "alert" in rule:
                self.assertIn(f"alertname: {rule['alert']}\n", covered,
                              f"alert {rule['alert']} has no promtool unit test")

    def test_every_alert_is_labelled_and_described(self):
        for _, rule in lib.alert_rules():
            if "alert" not in rule:
                continue
            self.assertIn(rule.get("labels", {}).get("severity"), ("warning", "critical"),
                          rule["alert"])
            for key in ("summary", "description"):
                self.assertTrue(rule.get("annotations", {}).get(key), f"{rule['alert']}: {key}")


if __name__ == "__main__":
    unittest.main(verbosity=2)
