"""Headless Chromium for the UI tests: Debian's chromium and chromium-driver (installed by `make
setup`), a private profile, and the Airflow login as a person does it."""

from __future__ import annotations

import os
import shutil

import pytest


def base_url() -> str:
    return f"http://127.0.0.1:{os.environ['FLEET_AIRFLOW_PORT']}"


def chromium() -> str:
    for name in ("chromium", "chromium-browser"):
        if shutil.which(name):
            return shutil.which(name)
    pytest.fail("chromium is not installed: `make setup` installs Debian's chromium and chromium-driver")


def headless_chrome(profile_dir, window: str = "1400,1800"):
    """A headless Chrome driver with its own profile folder (quit() it when done)."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    opts = webdriver.ChromeOptions()
    opts.binary_location = chromium()
    for flag in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-quic", "--no-first-run", "--disable-component-update", "--disable-sync",
                 f"--window-size={window}", f"--user-data-dir={profile_dir}"):
        opts.add_argument(flag)
    return webdriver.Chrome(service=Service(shutil.which("chromedriver")), options=opts)


def log_in(driver, user: str, timeout: float = 60, base: str | None = None, password: str | None = None):
    """Airflow's login page as a person fills it in; returns a WebDriverWait of `timeout` seconds.
    `base` / `password`: another Airflow than the tests' own (its URL, the user's password)."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions as EC
    from selenium.webdriver.support.ui import WebDriverWait

    from fleetlab import airflow_services as services

    wait = WebDriverWait(driver, timeout)
    driver.get(f"{base or base_url()}/auth/login/")
    wait.until(EC.presence_of_element_located((By.NAME, "username"))).send_keys(user)
    driver.find_element(By.NAME, "password").send_keys(password or services.passwords()[user])
    driver.find_element(By.CSS_SELECTOR, "button[type=submit]").click()
    wait.until(lambda d: "/auth/login" not in d.current_url)
    return wait
