"""The documentation runner's rules: which blocks must be marked, how output is matched, and
what a failing block reports."""

import pathlib
import subprocess
import sys
import tempfile
import textwrap
import unittest

import markdown_blocks
import output_match

RUNNER = pathlib.Path(__file__).with_name("run_doc.py")


class DocumentTest(unittest.TestCase):
    def setUp(self):
        self.directory = tempfile.TemporaryDirectory()
        self.root = pathlib.Path(self.directory.name)

    def tearDown(self):
        self.directory.cleanup()

    def document(self, text):
        path = self.root / "doc.md"
        path.write_text(textwrap.dedent(text), encoding="utf-8")
        return path


class MarkersTest(DocumentTest):
    def assert_refused(self, text, message):
        with self.assertRaisesRegex(markdown_blocks.MarkupError, message):
            markdown_blocks.parse(self.document(text))

    def test_an_unmarked_shell_python_or_console_block_is_refused_with_its_line(self):
        self.assert_refused("Intro\n\n```sh\nls\n```\n", r"doc.md:3: unmarked sh block")
        self.assert_refused("```python\npass\n```\n", r"doc.md:1: unmarked python block")
        self.assert_refused("```\n$ moestat demo\n```\n", r"doc.md:1: unmarked console block")

    def test_other_blocks_need_no_marker(self):
        blocks = markdown_blocks.parse(self.document("```cpp\nint x;\n```\n```\na -> b\n```\n"))
        self.assertEqual([(block.language, block.action) for block in blocks],
                         [("cpp", ""), ("", "")])

    def test_a_skip_needs_a_reason(self):
        self.assert_refused("<!-- doctest: skip: -->\n```sh\nls\n```\n", "needs a reason")

    def test_an_output_block_follows_a_run_block(self):
        self.assert_refused("<!-- doctest: output -->\n```\n1\n```\n", "must follow a run block")

    def test_a_marker_away_from_a_fence_is_refused(self):
        self.assert_refused("<!-- doctest: skip: why -->\n\nText.\n", "doc.md:1: a doctest marker")

    def test_unknown_options_and_needs_are_refused(self):
        self.assert_refused("<!-- doctest: run fast -->\n```sh\nls\n```\n",
                            "unknown doctest option")
        self.assert_refused("<!-- doctest: run needs=gpu -->\n```sh\nls\n```\n", "needs=gpu")

    def test_a_block_hidden_in_a_comment_is_refused(self):
        # The former hidden setup: code that ran before an example but that a reader never saw.
        self.assert_refused("""\
            <!-- doctest: setup
            ```sh
            touch a
            ```
            -->
            <!-- doctest: run -->
            ```sh
            ls a
            ```
            """, r"doc.md:2: a block inside an HTML comment is hidden")
        self.assert_refused("<!--\nnotes\n\n```python\nx = 1\n```\n-->\n",
                            r"doc.md:4: a block inside an HTML comment")

    def test_comments_closed_before_a_block_leave_it_visible(self):
        blocks = markdown_blocks.parse(self.document("""\
            <!-- a note --> text <!-- and
            another, closed here -->
            <!-- doctest: run needs=shared varies="took" tolerance=0.1 -->
            ```sh
            ls
            ```
            """))
        self.assertEqual([(block.line, block.action) for block in blocks], [(4, "run")])
        self.assertEqual((blocks[0].needs, blocks[0].varies, blocks[0].tolerance),
                         (frozenset({"shared"}), ("took",), 0.1))


class OutputMatchTest(unittest.TestCase):
    def test_fractions_within_the_tolerance_match_and_integers_must_be_equal(self):
        self.assertTrue(output_match.matches("mean 0.8842 of 3", "mean 0.8845 of 3"))
        self.assertFalse(output_match.matches("mean 0.8842 of 3", "mean 0.8942 of 3"))
        self.assertFalse(output_match.matches("mean 0.8842 of 3", "mean 0.8842 of 4"))
        self.assertTrue(output_match.matches("mean 0.88", "mean 0.90", tolerance=0.05))

    def test_text_around_numbers_must_be_equal(self):
        self.assertFalse(output_match.matches("balancedness 0.5", "imbalance 0.5"))
        self.assertFalse(output_match.matches("a 1 b", "a 1 b 2"))

    def test_trailing_spaces_and_blank_lines_do_not_count(self):
        self.assertTrue(output_match.matches("a  \nb\n\n", "a\nb"))

    def test_an_elision_line_stands_for_any_lines(self):
        self.assertTrue(output_match.matches("first\n...\nlast", "first\nlast"))
        self.assertTrue(output_match.matches("first\n...\nlast", "first\nx\ny\nlast"))
        self.assertFalse(output_match.matches("first\n...\nlast", "first\nx\nlast\nmore"))

    def test_numbers_on_varying_lines_are_free(self):
        self.assertTrue(output_match.matches("took 0.24 us", "took 9.5 us", varies=("took",)))
        self.assertFalse(output_match.matches("took 0.24 us", "took 9.5 ms", varies=("took",)))


class RunnerTest(DocumentTest):
    def run_document(self, text):
        cli = self.root / "fake_moestat"
        cli.write_text("#!/bin/sh\necho \"moestat $*\"\n")
        cli.chmod(0o755)
        (self.root / "build" / "python").mkdir(parents=True)
        return subprocess.run(
            [sys.executable, RUNNER, self.document(text), "--source-dir", self.root,
             "--build-dir", self.root / "build", "--cli", cli,
             "--engine-venv", self.root / "no-venv", "--shared", self.root / "no-shared"],
            capture_output=True, text=True, env={"PATH": "/usr/bin:/bin"}, check=False)

    def test_blocks_share_a_directory_and_their_output_is_compared(self):
        done = self.run_document("""\
            <!-- doctest: run -->
            ```sh
            echo 0.5 > value
            ```
            <!-- doctest: run -->
            ```
            $ build/moestat inspect value
            moestat inspect value
            $ cat value
            0.5
            ```
            <!-- doctest: run -->
            ```python
            scale = 2
            print(float(open("value").read()) * scale)
            ```
            <!-- doctest: output -->
            ```
            1.0
            ```
            """)
        self.assertEqual(done.returncode, 0, done.stdout + done.stderr)
        self.assertIn("3 of 3 run blocks passed", done.stdout)

    def test_a_wrong_output_fails_with_its_line_and_a_diff(self):
        done = self.run_document("""\
            Some text.

            <!-- doctest: run -->
            ```
            $ echo one
            one
            $ echo two
            three
            ```
            """)
        self.assertEqual(done.returncode, 1)
        self.assertIn("doc.md:7: the output differs", done.stderr)
        self.assertIn("-three\n+two", done.stderr)

    def test_a_failing_command_fails_with_its_output(self):
        done = self.run_document("<!-- doctest: run -->\n```sh\necho why; false\n```\n")
        self.assertEqual(done.returncode, 1)
        self.assertIn("doc.md:2: the block exited 1:\nwhy", done.stderr)

    def test_blocks_needing_what_is_absent_skip_and_a_document_of_only_those_is_skipped(self):
        done = self.run_document("<!-- doctest: run needs=shared -->\n```sh\nfalse\n```\n")
        self.assertEqual(done.returncode, 77, done.stdout + done.stderr)
        self.assertIn("doc.md:2: skipped here: no shared data", done.stdout)

    def test_a_missing_engine_environment_fails_where_it_is_required(self):
        done = subprocess.run(
            ["env", "MOESTAT_REQUIRE_ENGINE_VENV=1", sys.executable, RUNNER,
             self.document("<!-- doctest: run needs=engines -->\n```python\npass\n```\n"),
             "--source-dir", self.root, "--build-dir", self.root, "--cli", "/bin/true",
             "--engine-venv", self.root / "no-venv"],
            capture_output=True, text=True, check=False)
        self.assertEqual(done.returncode, 1)
        self.assertIn("MOESTAT_REQUIRE_ENGINE_VENV=1", done.stderr)


if __name__ == "__main__":
    unittest.main()
