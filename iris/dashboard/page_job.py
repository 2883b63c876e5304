"""The job page's script: summary, attempts timeline, tasks and the per-task log viewer.

Not the shell (page.py, which includes this) and not the data (/api/job, /api/job/logs).
The page is built once per job and then updated in place, so the log viewer's controls
(task, stream, filter, timestamps, follow) keep what the user typed across the 2 s refresh.
"""

JOB_JS = r"""
function human(n){if(n==null)return "";let v=Number(n);for(const u of ["B","KiB","MiB","GiB","TiB"]){if(v<1024||u==="TiB")return (v<10?v.toFixed(1):v.toFixed(0)).replace(/\.0$/,"")+" "+u;v/=1024;}}
let logView={id:null,task:"",stream:"",text:"",ts:false,follow:true,key:"",at:0,wasLive:null,data:null};
function logQuery(tail){const p=new URLSearchParams({id:logView.id});if(tail)p.set("tail",tail);
 if(logView.task!=="")p.set("task",logView.task);if(logView.stream)p.set("stream",logView.stream);
 if(logView.text)p.set("grep",logView.text.replace(/[.*+?^${}()|[\]\\]/g,"\\$&"));return p;}
// Logs come from the log store (GCS in production): read when the job opens or the controls
// change, every 2 s while following a live job, and once more when it ends; not otherwise.
async function loadLogs(live,force){
 const key=logQuery("1000").toString();
 const due=force||key!==logView.key||(live&&logView.follow&&Date.now()-logView.at>=1900)||(logView.wasLive&&!live);
 if(!due)return;
 logView.key=key;logView.at=Date.now();logView.wasLive=live;
 let d;try{d=await api("/api/job/logs?"+key);}catch(e){d={lines:[],error:e.message};}
 logView.data=d;renderLogs();
}
function renderLogs(){const pre=$("log-tail"),d=logView.data;if(!pre||!d)return;
 const atBottom=pre.scrollTop+pre.clientHeight>=pre.scrollHeight-8;
 pre.innerHTML=d.error?esc("logs unavailable: "+d.error):(d.lines.map(l=>`<span class="ln ${esc(l.stream)}">`+
  (logView.ts?`<span class="lt">${esc(l.time)}</span> `:"")+`<span class="lp">[${l.task}.${l.attempt}${l.stream==="stdout"?"":" "+esc(l.stream)}]</span> ${esc(l.text)}</span>`).join("\n")||
  `<span class="muted">${logView.text||logView.task!==""||logView.stream?"(no line matches these filters)":"(no output yet)"}</span>`);
 $("log-count").textContent=d.total!=null?(d.total>d.lines.length?`last ${d.lines.length} of ${d.total} lines`:`${d.total} lines`):"";
 const dl=logQuery("");if(TOKEN)dl.set("token",TOKEN);$("log-download").href="/api/job/logs/download?"+dl;
 if(logView.follow&&atBottom)pre.scrollTop=pre.scrollHeight;}
function jobSkeleton(id){
 logView=Object.assign(logView,{id,key:"",task:"",stream:"",text:"",data:null,wasLive:null});
 $("content").innerHTML=`<div id="job-head"></div><h3>Attempts</h3><div id="timeline"></div>
  <div id="tasks-wrap"></div><div id="usage-wrap"></div><div id="tools-wrap"></div>
  <div id="inspect-out"></div><h3>Logs</h3><div id="log-controls">
  <label>Task <select id="log-task"><option value="">all</option></select></label>
  <label>Stream <select id="log-stream"><option value="">stdout + stderr</option><option value="stdout">stdout</option>
   <option value="stderr">stderr</option><option value="build">environment build (uv)</option></select></label>
  <label>Filter <input id="log-filter" size="22" placeholder="text in the line"></label>
  <label><input type="checkbox" id="log-ts"> timestamps</label>
  <label><input type="checkbox" id="log-follow" checked> follow</label>
  <a id="log-download" download href="#">download</a> <span id="log-count" class="muted"></span></div>
  <pre id="log-tail"><span class="muted">loading…</span></pre>`;
 const again=()=>loadLogs(logView.wasLive,true);
 $("log-task").onchange=e=>{logView.task=e.target.value;again();};
 $("log-stream").onchange=e=>{logView.stream=e.target.value;again();};
 let typing=null;$("log-filter").oninput=e=>{clearTimeout(typing);typing=setTimeout(()=>{logView.text=e.target.value;again();},300);};
 $("log-ts").onchange=e=>{logView.ts=e.target.checked;renderLogs();};
 $("log-follow").onchange=e=>{logView.follow=e.target.checked;if(logView.follow){const p=$("log-tail");p.scrollTop=p.scrollHeight;}};
}
function span(s){if(s==null)return '<span class="muted">—</span>';return dur(s);}
function jobHead(j,live){const r=j.runs||{},d=j.durations||{};
 return `<h2 id="job-title">${esc(j.job_id)}</h2>
  <p>State <span id="job-state">${st(j.state)}</span> <span class="muted">${counts(j.task_counts)}</span>
  ${live?'<button id="kill-button">Kill job</button>':""}</p>
  ${j.error?`<p id="job-error" class="bad">Error: ${esc(j.error)}</p>`:""}
  ${j.pending_reason?`<p id="pending-reason">Why pending: ${reason(j.pending_reason)}</p>`:""}
  <table id="job-summary" class="kv">
  <tr><th>${r.kind==="command"?"Command":"Function"}</th><td id="job-command"><code>${esc(r.text)}</code></td></tr>
  <tr><th>Resources</th><td id="job-resources">${esc(j.resources_text)} <span class="muted">per task</span></td></tr>
  <tr><th>Replicas</th><td id="job-replicas">${esc(j.replicas)}</td></tr>
  <tr><th>User · priority</th><td>${esc(j.user)} · ${esc(j.priority)}</td></tr>
  <tr><th>Submitted</th><td class="time">${when(j.submitted_at)}</td></tr>
  <tr><th>Queued</th><td id="job-queued">${span(d.queued_s)}${d.running_s==null&&live?' <span class="muted">so far</span>':""}</td></tr>
  <tr><th>Running</th><td id="job-running">${span(d.running_s)}${d.running_s!=null&&live?' <span class="muted">so far</span>':""}</td></tr>
  ${j.finished_at?`<tr><th>Finished</th><td class="time">${when(j.finished_at)}</td></tr>`:""}</table>`;}
function timelineHtml(j){const bars=j.timeline||[];
 if(!bars.length)return '<p class="muted" id="timeline-empty">No attempt yet: the job waits for a worker with room (see why pending above).</p>';
 const total=Math.max(1,...bars.map(b=>b.ended_s||0));
 const pct=x=>(100*(x||0)/total).toFixed(2)+"%";
 return `<div class="tl-scale muted"><span>submitted</span><span>+${dur(total)}</span></div>`+bars.map(b=>{
  const s=b.started_s!=null?b.started_s:b.ended_s,wait=Math.max(0,s-(b.assigned_s||0)),run=b.started_s!=null?Math.max(0,b.ended_s-b.started_s):0;
  const how=b.live?"running":(b.exit_code!=null?`exit ${b.exit_code}`:esc(b.state));
  return `<div class="tl-row"><span class="tl-label">task ${b.task} · #${b.attempt}</span><span class="tl-track">
   <span class="tl-wait" style="left:${pct(b.assigned_s)};width:${pct(wait)}" title="starting: ${dur(wait)}"></span>
   <span class="tl-run ${esc(b.state)}" style="left:${pct(s)};width:${pct(run)}" title="${esc(b.state)}: ${dur(run)}"></span></span>
   <span class="tl-note">${st(b.state)} ${dur(run)} · ${how} · <span class="muted">${esc(b.worker_id)}</span>${b.error?` <span class="muted">${esc(b.error)}</span>`:""}</span></div>`;}).join("");}
async function jobPage(id){
 const j=await api("/api/job?id="+encodeURIComponent(id));
 const live=["pending","building","running"].includes(j.state);
 if(logView.id!==id||!$("log-tail"))jobSkeleton(id);
 $("job-head").innerHTML=jobHead(j,live);
 $("timeline").innerHTML=timelineHtml(j);
 const attempts=t=>t.attempt_list.map(a=>`#${a.number} ${st(a.state)} on ${esc(a.worker_id)}`+
  (a.exit_code!=null?` exit ${a.exit_code}`:"")).join("<br>");
 $("tasks-wrap").innerHTML=`<h3>Tasks</h3>`+table("tasks",["Task","State","Attempts (worker, exit code)","Error"],
  j.tasks.map(t=>[t.index,st(t.state),attempts(t),esc(t.error)]),"task-row");
 const sel=$("log-task");if(sel.options.length!==j.tasks.length+1)
  sel.innerHTML='<option value="">all</option>'+j.tasks.map(t=>`<option value="${t.index}">${t.index}</option>`).join("");
 sel.value=logView.task;
 if(live)$("kill-button").onclick=async()=>{if(!confirm("Kill "+id+"?"))return;
  try{await api("/api/job/kill",{method:"POST",headers:headers({"X-Iris-Dashboard":"1","Content-Type":"application/json"}),
   body:JSON.stringify({job_id:id})});}catch(e){$("error").textContent="kill refused: "+e.message;}refresh();};
 await inspectSection(id);
 await loadLogs(live,false);
}
"""
