// The theme before the first paint: a classic script in <head> (not a module, which would run
// after the page is drawn, and not inline, which the CSP forbids) reads the choice the settings
// dialog mirrored to localStorage and sets <html data-theme>. "system" (or nothing stored)
// leaves the attribute off, so static/css/theme.css follows the operating system.
try {
  const theme = localStorage.getItem("orchestrator.theme");
  if (theme === "light" || theme === "dark") document.documentElement.dataset.theme = theme;
} catch {
  // storage refused (private mode): the system's theme until the settings load
}
