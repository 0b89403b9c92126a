// Light or dark: the OS preference until the toggle picks one (remembered in localStorage: not a secret).
const root = document.documentElement;
const saved = localStorage.getItem("repoctx.theme");
if (saved === "light" || saved === "dark") root.dataset.theme = saved;

function current() {
  return root.dataset.theme || (matchMedia("(prefers-color-scheme: dark)").matches ? "dark" : "light");
}

function label(button) {
  const dark = current() === "dark";
  button.setAttribute("aria-pressed", String(dark));
  button.textContent = dark ? "Light theme" : "Dark theme";
  button.setAttribute("aria-label", dark ? "Switch to the light theme" : "Switch to the dark theme");
}

function wire() {
  const button = document.getElementById("theme-toggle");
  if (!button) return;
  label(button);
  button.addEventListener("click", () => {
    root.dataset.theme = current() === "dark" ? "light" : "dark";
    localStorage.setItem("repoctx.theme", root.dataset.theme);
    label(button);
  });
  matchMedia("(prefers-color-scheme: dark)").addEventListener("change", () => label(button));
}

if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", wire);
else wire();
