// The accessibility checks of test_dashboard_a11y.py, run in the page: defines window.a11y.
(() => {
  "use strict";
  // Colours as the page computes them: a text's effective background (the layers behind it,
  // walking up), and the WCAG contrast ratio of two colours.
  const rgba = (value) => {
    const parts = value.match(/[\d.]+/g);
    if (!value.startsWith("rgb") || !parts) throw new Error(`a colour it cannot read: ${value}`);
    const [r, g, b, a = 1] = parts.map(Number);
    return [r, g, b, a];
  };
  const over = ([r, g, b, a], [R, G, B]) => [r * a + R * (1 - a), g * a + G * (1 - a), b * a + B * (1 - a)];
  const background = (el) => {
    const layers = [];
    for (let node = el; node; node = node.parentElement) {
      const layer = rgba(getComputedStyle(node).backgroundColor);
      if (layer[3] > 0) layers.push(layer);
      if (layer[3] >= 1) break;
    }
    return layers.reverse().reduce((below, layer) => over(layer, below), [255, 255, 255]);
  };
  const luminance = (rgb) => {
    const [r, g, b] = rgb.map((c) => {
      c /= 255;
      return c <= 0.03928 ? c / 12.92 : ((c + 0.055) / 1.055) ** 2.4;
    });
    return 0.2126 * r + 0.7152 * g + 0.0722 * b;
  };
  const contrast = (one, two) => {
    const [hi, lo] = [luminance(one), luminance(two)].sort((x, y) => y - x);
    return (hi + 0.05) / (lo + 0.05);
  };

  // What fails each check, described: {check: [problem, ...]}.
  const audit = () => {
    const found = {unnamed: [], images: [], document: [], headings: [], contrast: []};
    const shown = (el) => {
      const box = el.getBoundingClientRect(), style = getComputedStyle(el);
      return box.width > 1 && box.height > 1 && style.visibility !== "hidden";
    };
    const text = (el) => (el.textContent || "").replace(/\s+/g, " ").trim();
    const describe = (el) => {
      const classes = typeof el.className === "string" && el.className.trim()
        ? "." + el.className.trim().split(/\s+/).join(".") : "";
      return `${el.tagName.toLowerCase()}${classes} “${text(el).slice(0, 40) || el.value || ""}”`;
    };

    for (const el of document.querySelectorAll("input, select, textarea, button")) {
      if (el.type === "hidden") continue;
      const labelledBy = (el.getAttribute("aria-labelledby") || "").split(/\s+/)
        .map((id) => document.getElementById(id)).filter(Boolean).map(text).join(" ");
      const name = (el.getAttribute("aria-label") || "").trim() || labelledBy
        || [...(el.labels || [])].map(text).join(" ")
        || (el.tagName === "BUTTON" ? text(el) : "")
        || (el.tagName === "INPUT" && ["submit", "button", "reset"].includes(el.type) ? el.value : "");
      if (!name.trim()) found.unnamed.push(describe(el));
    }

    for (const el of document.querySelectorAll("img, svg, canvas, [role=img]")) {
      if (el.closest("[aria-hidden=true]")) continue;
      const named = (el.getAttribute("aria-label") || "").trim()
        || (el.getAttribute("aria-labelledby") || "").trim()
        || (el.tagName === "IMG" && el.hasAttribute("alt"))
        || (el.tagName === "svg" && el.querySelector(":scope > title"));
      if (!named) found.images.push(describe(el));
    }

    if (!document.documentElement.lang) found.document.push("no lang on <html>");
    if (!document.title.trim()) found.document.push("no title");
    const h1s = document.querySelectorAll("h1").length;
    if (h1s !== 1) found.document.push(`${h1s} h1 elements`);

    let level = 0;
    for (const h of document.querySelectorAll("h1, h2, h3, h4, h5, h6")) {
      const next = Number(h.tagName[1]);
      if (next > level + 1) found.headings.push(`h${next} “${text(h)}” after h${level}`);
      level = next;
    }

    const texts = [...document.querySelectorAll("body *")].filter((el) =>
      [...el.childNodes].some((n) => n.nodeType === Node.TEXT_NODE && n.textContent.trim())
      || (el.matches("input:not([type=hidden]):not([type=checkbox]), select") && el.value));
    for (const el of texts) {
      if (!shown(el) || el.closest("svg, title")) continue;
      const style = getComputedStyle(el);
      let [r, g, b, a] = rgba(style.color);
      for (let node = el; node; node = node.parentElement) a *= Number(getComputedStyle(node).opacity);
      const back = background(el);
      const fore = over([r, g, b, a], back);
      const ratio = contrast(fore, back);
      const size = parseFloat(style.fontSize), bold = Number(style.fontWeight) >= 700;
      const needed = size >= 24 || (bold && size >= 18.66) ? 3 : 4.5;
      if (ratio < needed) {
        found.contrast.push(`${describe(el)}: ${ratio.toFixed(2)} < ${needed} (${style.color} on rgb(${back.map(Math.round)}))`);
      }
    }
    return Object.fromEntries(Object.entries(found).map(([check, listed]) => [check, [...new Set(listed)]]));
  };

  // Where the keyboard must go (numbered in data-target), described.
  const targets = () => {
    const targets = [...document.querySelectorAll("header nav a, header a.brand, header input[type=search]")];
    targets.forEach((el, n) => { el.dataset.target = String(n); });
    return targets.map((el) => `${el.tagName.toLowerCase()} “${el.textContent.trim() || el.getAttribute("aria-label")}”`);
  };

  // How an element's focus shows: its outline, its shadow, and the outline's contrast.
  const ring = (el) => {
    const style = getComputedStyle(el);
    const seen = style.outlineStyle === "none" ? null
      : contrast(over(rgba(style.outlineColor), background(el.parentElement)), background(el.parentElement));
    return {outline: `${style.outlineStyle} ${style.outlineWidth} ${style.outlineColor}`,
            shadow: style.boxShadow, target: el.dataset ? el.dataset.target ?? null : null,
            contrast: seen};
  };

  window.a11y = {audit, targets, ring, rgba, contrast};
})();
