// Loads a `tsp-trace perfetto` export with Chrome DevTools' trace engine (the Performance panel's parser) and
// prints what it made of it as JSON: per process (chip) its tracks and slices, and the flows.
// Usage: node load_perfetto.mjs NODE_MODULES_DIR TRACE.json
import fs from 'node:fs';
import path from 'node:path';
import {pathToFileURL} from 'node:url';

const [modules, file] = process.argv.slice(2);
// The engine measures layout with DOMRect, which Node lacks.
globalThis.DOMRect ??= class DOMRect {
  constructor(x = 0, y = 0, width = 0, height = 0) {
    Object.assign(this, {x, y, width, height});
  }
};
const engine = path.join(modules, '@paulirish', 'trace_engine', 'models', 'trace', 'trace.js');
const Trace = await import(pathToFileURL(engine).href);
const events = JSON.parse(fs.readFileSync(file, 'utf8')).traceEvents;
const model = Trace.TraceModel.Model.createWithAllHandlers();
await model.parse(events);
const parsed = model.parsedTrace();
const data = parsed.data ?? parsed;
const processes = {};
for (const [pid, proc] of data.Renderer.processes) {
  const tracks = {};
  for (const [tid, thread] of proc.threads) {
    if (thread.entries.length > 0) tracks[tid] = thread.entries.length;
  }
  processes[pid] = tracks;
}
console.log(JSON.stringify({processes, flows: data.Flows.flows.length}));
