"""A person who uses the keyboard only (as test_panel.py, whose fixtures it uses): from a notebook's context menu
to a distributed job that succeeded and its logs, each key press counted, the focus checked at every step."""

from playwright.sync_api import expect
from test_panel import assert_accessible, empty_repo, lab, lab_page  # noqa: F401 (lab is a fixture)

# What the journey may cost at most in key presses besides the text typed (39 today): a change that adds a Tab stop
# on the way, or loses the focus, fails here.
MOST_KEY_PRESSES = 40


class Keyboard:
    """The page's keyboard as a person presses it, counting the keys pressed (with their modifiers) and the
    characters typed."""

    def __init__(self, page):
        self.page = page
        self.presses = 0
        self.typed = 0

    def press(self, key: str) -> None:
        self.page.keyboard.press(key)
        self.presses += 1

    def type(self, text: str) -> None:
        self.page.keyboard.type(text)
        self.typed += len(text)

    def until(self, key: str, reached, most: int = 40) -> int:
        """Press `key` until `reached()` is true: how many presses that took."""
        for presses in range(most + 1):
            if reached():
                return presses
            self.press(key)
        raise AssertionError(f"{key} pressed {most} times without getting there")


def focused(locator) -> bool:
    return locator.evaluate("element => element === document.activeElement")


def test_a_distributed_job_from_a_notebooks_context_menu_to_its_logs_with_the_keyboard_only(lab):
    empty_repo(lab.root_dir / "project")
    with lab_page(lab, "lab/tree/project/explore.ipynb") as page:
        keys = Keyboard(page)
        expect(page.locator(".jp-Dialog")).to_contain_text("Select kernel", timeout=60_000)
        keys.press("Escape")  # no kernel: the notebook is only where the code is
        page.wait_for_function("document.activeElement?.closest('.jp-Notebook')", timeout=30_000)

        # The notebook's context menu, from the keyboard: T is its item's first letter, Enter opens the form,
        # the focus on the job's name.
        keys.press("Shift+F10")
        expect(page.locator(".lm-Menu")).to_be_visible()
        keys.press("t")
        expect(page.locator(".lm-Menu-item.lm-mod-active")).to_contain_text("Train this notebook's repo")
        keys.press("Enter")
        form = page.locator(".jp-distrain-form")
        name = form.locator('[data-field="name"] input')
        expect(name).to_have_value("explore", timeout=30_000)
        expect(name).to_be_focused()

        keys.press("Control+a")
        keys.type("journey")
        keys.press("Tab")
        framework = form.locator('[data-field="framework"] select')
        expect(framework).to_be_focused()
        keys.press("t")  # a select's own type-ahead
        expect(framework).to_have_value("tensorflow")
        keys.press("Tab")
        expect(form.locator('[data-field="command"] textarea')).to_be_focused()
        keys.type("python train.py 8 0.1")
        distributed = form.get_by_label("Distributed")
        to_distributed = keys.until("Tab", lambda: focused(distributed))
        keys.press("Space")
        expect(distributed).to_be_checked()
        ps = form.get_by_label("ps count")
        to_ps = keys.until("Tab", lambda: focused(ps))
        keys.press("Control+a")
        keys.type("1")
        expect(form.get_by_label("worker count")).to_have_value("2")
        expect(form.get_by_text("The server accepts this job.")).to_be_visible(timeout=15_000)

        # Ctrl+Enter submits from any field; the job's view opens with the focus in it.
        keys.press("Control+Enter")
        view = page.locator(".jp-distrain-job-view-widget")
        expect(view.locator("h2")).to_have_text("journey", timeout=30_000)
        page.wait_for_function(
            "document.querySelector('.jp-distrain-job-view-widget')?.contains(document.activeElement)",
            timeout=10_000)
        # a screen reader hears the phase change: it is a status
        expect(view.get_by_role("status")).to_have_text("Succeeded", timeout=120_000)

        # Tab reaches the log, whose lines the arrow keys scroll.
        log = view.get_by_role("region", name="Log lines")
        to_log = keys.until("Tab", lambda: focused(log))
        expect(log.locator(".jp-distrain-logline", has_text="worker 1 of").first).to_be_attached(timeout=30_000)
        keys.press("End")
        expect(log.locator(".jp-distrain-logline", has_text="step 7 lr 0.1").first).to_be_visible()
        assert_accessible(page, ".jp-distrain-job-view-widget")

        print(f"key presses: {keys.presses}, characters typed: {keys.typed} (Tab to Distributed "
              f"{to_distributed}, to the ps count {to_ps}, to the log {to_log})")
        assert keys.presses <= MOST_KEY_PRESSES, keys.presses
