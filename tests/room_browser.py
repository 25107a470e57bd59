#!/usr/bin/env python3
"""The waiting room's page in a real browser (tests/it_room_browser.sh): headless
Debian chromium through chromedriver (Selenium). argv: the page's URL (with
#buyer=<token>), the directory for the profile and the screenshot. Opens the page,
joins, waits for the buy button (admitted), buys, waits for the order's answer.
Prints one "ok   - ..." or "FAIL - ..." line per check and exits 0 when all passed.
Every wait is a condition with a bound (WebDriverWait), sized for a busy machine."""
import sys

from selenium import webdriver
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import WebDriverWait

url, work = sys.argv[1], sys.argv[2]
failed = 0


def check(what, ok, got=""):
    global failed
    print(("ok   - " if ok else "FAIL - ") + what + ("" if ok else f" (got {got!r})"), flush=True)
    failed += 0 if ok else 1


opts = webdriver.ChromeOptions()
opts.binary_location = "/usr/bin/chromium"
for a in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
          "--no-first-run", "--disable-extensions", f"--user-data-dir={work}/profile",
          "--window-size=900,600"):
    opts.add_argument(a)
driver = webdriver.Chrome(service=Service("/usr/bin/chromedriver", log_output=f"{work}/chromedriver.log"),
                          options=opts)
try:
    driver.get(url)
    text = lambda i: driver.find_element(By.ID, i).text
    check("the page names the SKU", text("sku") == "web", text("sku"))
    user = driver.find_element(By.ID, "user")
    check("the user id comes from the buyer's token", user.get_attribute("value") == "ann",
          user.get_attribute("value"))
    driver.find_element(By.CSS_SELECTOR, "#join button").click()
    # admitted within a tick or two at 5 a second; 30 s for a busy machine
    buy = driver.find_element(By.ID, "buy")
    WebDriverWait(driver, 30).until(lambda d: buy.is_displayed())
    check("admitted: the buy button shows", buy.is_displayed())
    check("... and the pass's deadline", "buy before" in text("status"), text("status"))
    driver.save_screenshot(f"{work}/room-admitted.png")
    buy.click()
    WebDriverWait(driver, 30).until(lambda d: text("answer") != "")
    answer = text("answer")
    check("the order's answer: pending, with a pay-by time",
          answer.startswith("Order ") and ": pending, to pay by " in answer, answer)
    check("... and the status says bought", text("status") == "Bought", text("status"))
    driver.save_screenshot(f"{work}/room-bought.png")
finally:
    driver.quit()
sys.exit(1 if failed else 0)
