<?xml version="1.0" encoding="utf-8"?>
<!DOCTYPE TS>
<TS version="2.1" language="zh_CN">
<context>
    <name>BackgroundCalibration</name>
    <message>
        <source>Calibration cancelled</source>
        <translation>校准已取消</translation>
    </message>
    <message>
        <source>Calibration failed: {0}</source>
        <translation>校准失败：{0}</translation>
    </message>
</context>
<context>
    <name>BranchDialog</name>
    <message>
        <source>Branch from v{0}</source>
        <translation>从 v{0} 创建分支</translation>
    </message>
    <message>
        <source>&amp;Prompt for the new version:</source>
        <translation>新版本的提示词(&amp;P)：</translation>
    </message>
    <message>
        <source>&amp;Branch</source>
        <translation>创建分支(&amp;B)</translation>
    </message>
</context>
<context>
    <name>BufferPanel</name>
    <message>
        <source>No run yet</source>
        <translation>尚未运行</translation>
    </message>
    <message>
        <source>1 · Input: chunks</source>
        <translation>1 · 输入：分块</translation>
    </message>
    <message>
        <source>2 · KV cache</source>
        <translation>2 · KV 缓存</translation>
    </message>
    <message>
        <source>3 · Output</source>
        <translation>3 · 输出</translation>
    </message>
    <message>
        <source>{0}: {1:,} of {2:,} tokens kept, budget {3:,}, {4} pass(es), {5} span(s) dropped, boundaries {6:.0%}</source>
        <translation>{0}：保留 {1:,} / {2:,} 个 token，预算 {3:,}，{4} 轮，丢弃 {5} 个片段，边界完整度 {6:.0%}</translation>
    </message>
    <message>
        <source>Engine error: {0}</source>
        <translation>引擎错误：{0}</translation>
    </message>
    <message>
        <source>Strategy: {0}</source>
        <translation>策略：{0}</translation>
    </message>
    <message>
        <source>Refused: {0}</source>
        <translation>已拒绝：{0}</translation>
    </message>
    <message>
        <source>Error: {0}</source>
        <translation>错误：{0}</translation>
    </message>
    <message>
        <source>Finished: {0} · {1:,} prompt tokens ({2:,} evaluated) · {3:,} generated · KV peak {4:,} of {5:,} · {6:.1f} s</source>
        <translation>已结束：{0} · 提示词 {1:,} 个 token（已计算 {2:,} 个）· 生成 {3:,} 个 · KV 峰值 {4:,} / {5:,} · {6:.1f} 秒</translation>
    </message>
</context>
<context>
    <name>ChunkQueueModel</name>
    <message>
        <source>#</source>
        <translation>序号</translation>
    </message>
    <message>
        <source>Characters</source>
        <translation>字符</translation>
    </message>
    <message>
        <source>Tokens</source>
        <translation>Token 数</translation>
    </message>
    <message>
        <source>State</source>
        <translation>状态</translation>
    </message>
    <message>
        <source>pending</source>
        <translation>等待中</translation>
    </message>
    <message>
        <source>in KV</source>
        <translation>在 KV 中</translation>
    </message>
    <message>
        <source>done</source>
        <translation>已完成</translation>
    </message>
    <message>
        <source>evicted</source>
        <translation>已逐出</translation>
    </message>
</context>
<context>
    <name>CompareView</name>
    <message>
        <source>strategy</source>
        <translation>策略</translation>
    </message>
    <message>
        <source>kept</source>
        <translation>保留</translation>
    </message>
    <message>
        <source>passes</source>
        <translation>轮数</translation>
    </message>
    <message>
        <source>boundaries</source>
        <translation>边界完整度</translation>
    </message>
    <message>
        <source>needles</source>
        <translation>针</translation>
    </message>
    <message>
        <source>prompt</source>
        <translation>提示词</translation>
    </message>
    <message>
        <source>generated</source>
        <translation>生成</translation>
    </message>
    <message>
        <source>KV peak</source>
        <translation>KV 峰值</translation>
    </message>
    <message>
        <source>seconds</source>
        <translation>秒</translation>
    </message>
    <message>
        <source>finish</source>
        <translation>结束原因</translation>
    </message>
    <message>
        <source>The overflow strategy that chose what reaches the model</source>
        <translation>决定哪些内容送达模型的溢出策略</translation>
    </message>
    <message>
        <source>Document tokens the plan keeps, of all its tokens</source>
        <translation>计划保留的文档token数（占全部token）</translation>
    </message>
    <message>
        <source>Model calls the strategy makes (map-reduce and rolling make one per window, then combine)</source>
        <translation>该策略调用模型的次数（map-reduce 和 rolling 每个窗口调用一次，然后合并）</translation>
    </message>
    <message>
        <source>Share of the cuts between kept spans that fall on a sentence boundary or better</source>
        <translation>保留片段之间的切分落在句子边界或更好位置上的比例</translation>
    </message>
    <message>
        <source>Share of the needles (the facts typed in the Needles box) whose text lies in the kept spans</source>
        <translation>文本位于保留片段中的“针”（在“针”输入框中输入的事实）的比例</translation>
    </message>
    <message>
        <source>Prompt tokens the model evaluated, all calls together</source>
        <translation>模型评估的提示token数（所有调用合计）</translation>
    </message>
    <message>
        <source>Tokens the model generated, all calls together</source>
        <translation>模型生成的token数（所有调用合计）</translation>
    </message>
    <message>
        <source>The most KV cache cells the job held at once</source>
        <translation>任务同时占用的 KV 缓存单元的最大数量</translation>
    </message>
    <message>
        <source>Wall time of the strategy&apos;s run, in seconds</source>
        <translation>该策略运行的实际耗时（秒）</translation>
    </message>
    <message>
        <source>Why the reply ended: stop (the model finished), length (the reply&apos;s room ran out), cancelled, or the error</source>
        <translation>回复结束的原因：停止（模型已完成）、长度（回复空间用完）、已取消，或错误信息</translation>
    </message>
</context>
<context>
    <name>DiffDialog</name>
    <message>
        <source>The two versions are the same.</source>
        <translation>两个版本相同。</translation>
    </message>
</context>
<context>
    <name>DocumentView</name>
    <message>
        <source>No document</source>
        <translation>没有文档</translation>
    </message>
    <message>
        <source>Document text</source>
        <translation>文档文本</translation>
    </message>
    <message>
        <source>Position in the document</source>
        <translation>文档中的位置</translation>
    </message>
    <message>
        <source>Span under the caret</source>
        <translation>光标处的片段</translation>
    </message>
    <message>
        <source>tokens per chunk</source>
        <translation>每块 token 数</translation>
    </message>
    <message>
        <source>chunks</source>
        <translation>分块数</translation>
    </message>
    <message>
        <source>budget {value:,.0f}</source>
        <translation>预算 {value:,.0f}</translation>
    </message>
    <message>
        <source>{0:,} characters</source>
        <translation>{0:,} 个字符</translation>
    </message>
    <message>
        <source>{0:,} tokens (model)</source>
        <translation>{0:,} 个 token（模型）</translation>
    </message>
    <message>
        <source>tokens (model): no model</source>
        <translation>token（模型）：未加载模型</translation>
    </message>
    <message>
        <source>tokens (model): counting…</source>
        <translation>token（模型）：正在计数…</translation>
    </message>
    <message>
        <source>{0:,} tokens (cl100k)</source>
        <translation>{0:,} 个 token（cl100k）</translation>
    </message>
    <message>
        <source>tokens (cl100k): counting…</source>
        <translation>token（cl100k）：正在计数…</translation>
    </message>
    <message>
        <source>about </source>
        <translation>约 </translation>
    </message>
    <message>
        <source>{0}{1:,.1f}× the {2:,}-token context</source>
        <translation>为 {2:,} token 上下文的{0}{1:,.1f} 倍</translation>
    </message>
    <message>
        <source>fits the {0:,}-token context</source>
        <translation>可放入 {0:,} token 的上下文</translation>
    </message>
    <message>
        <source>Kept: {0}</source>
        <translation>保留：{0}</translation>
    </message>
    <message>
        <source>Dropped: {0}</source>
        <translation>丢弃：{0}</translation>
    </message>
    <message>
        <source>{0:,} tokens, characters {1:,}–{2:,}</source>
        <translation>{0:,} 个 token，字符 {1:,}–{2:,}</translation>
    </message>
    <message>
        <source>In pass {0:,} of {1:,}</source>
        <translation>在第 {0:,} 轮（共 {1:,} 轮）</translation>
    </message>
    <message>
        <source>In passes {0:,}–{1:,} of {2:,}</source>
        <translation>在第 {0:,}–{1:,} 轮（共 {2:,} 轮）</translation>
    </message>
    <message>
        <source>Chunk {0:,} of {1:,}: {2:,} tokens</source>
        <translation>第 {0:,} 块（共 {1:,} 块）：{2:,} 个 token</translation>
    </message>
    <message>
        <source>tokens per chunk (budget {0:,}, off the scale)</source>
        <translation>每块token数（预算 {0:,}，超出坐标范围）</translation>
    </message>
    <message>
        <source>{0}: refused — {1}</source>
        <translation>{0}：已拒绝 — {1}</translation>
    </message>
    <message>
        <source>{0}: {1:,} of {2:,} tokens reach the model · spans kept/dropped: {3:,}/{4:,} · {5:,} chunks · cuts on sentence boundaries or better: {6:.0%}</source>
        <translation>{0}：{1:,} / {2:,} 个 token 送入模型 · 保留/丢弃片段：{3:,}/{4:,} · {5:,} 个分块 · 切分点位于句子或更大边界：{6:.0%}</translation>
    </message>
    <message>
        <source> · {0:,} passes, the largest {1:,} tokens (budget {2:,})</source>
        <translation> · {0:,} 轮，最大一轮 {1:,} 个 token（预算 {2:,}）</translation>
    </message>
</context>
<context>
    <name>EngineDriver</name>
    <message>
        <source>Loading model…</source>
        <translation>正在加载模型…</translation>
    </message>
    <message>
        <source>Token counts come from llama.cpp&apos;s own tokenizer (exact, slower): {0}</source>
        <translation>词元计数来自 llama.cpp 自身的分词器（精确，较慢）：{0}</translation>
    </message>
    <message>
        <source>Calibrating…</source>
        <translation>正在校准…</translation>
    </message>
    <message>
        <source>Calibration cancelled</source>
        <translation>校准已取消</translation>
    </message>
    <message>
        <source>Calibration failed: {0}</source>
        <translation>校准失败：{0}</translation>
    </message>
    <message>
        <source>Connecting to {0}…</source>
        <translation>正在连接 {0}…</translation>
    </message>
    <message>
        <source>Connecting to {0} servers…</source>
        <translation>正在连接 {0} 台服务器…</translation>
    </message>
    <message>
        <source>Counting tokens…</source>
        <translation>正在统计 token…</translation>
    </message>
    <message>
        <source>Running…</source>
        <translation>正在运行…</translation>
    </message>
</context>
<context>
    <name>Finish</name>
    <message>
        <source>stop</source>
        <translation>停止</translation>
    </message>
    <message>
        <source>length</source>
        <translation>长度</translation>
    </message>
    <message>
        <source>cancelled</source>
        <translation>已取消</translation>
    </message>
    <message>
        <source>error</source>
        <translation>错误</translation>
    </message>
    <message>
        <source>repetition</source>
        <translation>重复</translation>
    </message>
    <message>
        <source>abort</source>
        <translation>中止</translation>
    </message>
</context>
<context>
    <name>GaugePlots</name>
    <message>
        <source>Tokens per second</source>
        <translation>每秒 token 数</translation>
    </message>
    <message>
        <source>seconds ago</source>
        <translation>秒前</translation>
    </message>
    <message>
        <source>generation</source>
        <translation>生成</translation>
    </message>
    <message>
        <source>prompt</source>
        <translation>提示词</translation>
    </message>
    <message>
        <source>over</source>
        <translation>超出</translation>
    </message>
    <message>
        <source>1 prompt</source>
        <translation>1 个提示词</translation>
    </message>
    <message>
        <source>{0:,} prompts</source>
        <translation>{0:,} 个提示词</translation>
    </message>
    <message>
        <source>Prompt length, % of n_ctx ({0})</source>
        <translation>提示词长度，占 n_ctx 的百分比（{0}）</translation>
    </message>
</context>
<context>
    <name>GaugesPanel</name>
    <message>
        <source>no GPU figures: nvidia-ml-py is not installed</source>
        <translation>无 GPU 数据：未安装 nvidia-ml-py</translation>
    </message>
    <message>
        <source>no GPU: the NVIDIA driver is not available</source>
        <translation>无 GPU：NVIDIA 驱动不可用</translation>
    </message>
    <message>
        <source>no GPU found</source>
        <translation>未找到 GPU</translation>
    </message>
    <message>
        <source>–</source>
        <translation>–</translation>
    </message>
    <message>
        <source>KV cache</source>
        <translation>KV 缓存</translation>
    </message>
    <message>
        <source>RAM</source>
        <translation>内存</translation>
    </message>
    <message>
        <source>VRAM</source>
        <translation>显存</translation>
    </message>
    <message>
        <source>CPU</source>
        <translation>CPU</translation>
    </message>
    <message>
        <source>Lanes</source>
        <translation>通道</translation>
    </message>
    <message>
        <source>Prompt</source>
        <translation>提示词</translation>
    </message>
    <message>
        <source>Passes</source>
        <translation>轮次</translation>
    </message>
    <message>
        <source>Last job: {0:,} prompt tokens evaluated in {1:.2f} s to first token ({2:,.0f} tokens/s); {3:,} tokens generated; {4:.1f} s in all</source>
        <translation>上一个作业：{0:,} 个提示词 token 计算完毕，{1:.2f} 秒后输出首个 token（{2:,.0f} token/秒）；生成 {3:,} 个 token；共 {4:.1f} 秒</translation>
    </message>
    <message>
        <source>no model loaded</source>
        <translation>未加载模型</translation>
    </message>
    <message>
        <source>{0:,} of {1:,} cells · {2}</source>
        <translation>{0:,} / {1:,} 个单元 · {2}</translation>
    </message>
    <message>
        <source>{0:,} of {1:,} cells (the server&apos;s {2})</source>
        <translation>{0:,} / {1:,} 个单元（来自服务器的 {2}）</translation>
    </message>
    <message>
        <source>{0:,} of {1:,} positions by the last request; KV not reported by this server</source>
        <translation>上一次请求占用 {0:,} / {1:,} 个位置；此服务器不报告 KV</translation>
    </message>
    <message>
        <source>The server does not report its KV cache; the bar shows the prompt and reply of the last request, by its token counts</source>
        <translation>服务器不报告其 KV 缓存；此条按 token 数显示上一次请求的提示词和回复</translation>
    </message>
    <message>
        <source>none</source>
        <translation>无</translation>
    </message>
    <message>
        <source>app {0} + engine {1} of {2}</source>
        <translation>应用 {0} + 引擎 {1}，共 {2}</translation>
    </message>
    <message>
        <source>{0} of {1} threads</source>
        <translation>{0} / {1} 个线程</translation>
    </message>
    <message>
        <source>another program is using a core</source>
        <translation>另一个程序正在占用一个核心</translation>
    </message>
    <message>
        <source>the machine is quiet again</source>
        <translation>机器重新空闲</translation>
    </message>
    <message>
        <source>decoding became much slower than before</source>
        <translation>解码速度比之前慢了很多</translation>
    </message>
    <message>
        <source>{0} → {1} threads: {2}</source>
        <translation>{0} → {1} 个线程：{2}</translation>
    </message>
    <message>
        <source>llama.cpp computes on fewer threads while other programs keep cores busy: its threads wait for each other at every step, and one that has to share a core holds up the rest</source>
        <translation>其他程序占用核心时，llama.cpp 会减少计算线程：它的线程在每一步都互相等待，一个需要与别的程序共用核心的线程会拖慢其余所有线程</translation>
    </message>
    <message>
        <source>A decode took {0:.2f} s where {1:.2f} s was expected.</source>
        <translation>一次解码用时 {0:.2f} 秒，预期为 {1:.2f} 秒。</translation>
    </message>
    <message>
        <source>Other programs used {0:.1f} cores.</source>
        <translation>其他程序占用了 {0:.1f} 个核心。</translation>
    </message>
    <message>
        <source>{0:,} tokens evaluated in {1:.1f} s ({2:,.0f} tokens/s)</source>
        <translation>{1:.1f} 秒内评估了 {0:,} 个token（每秒 {2:,.0f} 个）</translation>
    </message>
    <message>
        <source>{0:,} of {1:,} tokens · {2:,.0f} tokens/s · {3} left</source>
        <translation>{0:,} / {1:,} 个token · 每秒 {2:,.0f} 个 · 剩余 {3}</translation>
    </message>
    <message>
        <source>{0:,} of {1:,} tokens</source>
        <translation>{0:,} / {1:,} 个token</translation>
    </message>
    <message>
        <source>Window {0} of {1} · {2}</source>
        <translation>第 {0} 个窗口，共 {1} 个 · {2}</translation>
    </message>
    <message>
        <source>Lane {0}</source>
        <translation>通道 {0}</translation>
    </message>
    <message>
        <source>{0} lanes: {1:,} of {2} × {3:,} cells</source>
        <translation>{0} 个通道：{1:,} / {2} × {3:,} 个单元</translation>
    </message>
    <message>
        <source>no GPU</source>
        <translation>无 GPU</translation>
    </message>
    <message>
        <source>{0} of {1}</source>
        <translation>{0} / {1}</translation>
    </message>
</context>
<context>
    <name>Help</name>
    <message>
        <source>The user guide is missing from this build.</source>
        <translation>此版本缺少用户指南。</translation>
    </message>
    <message>
        <source>ContextLens User Guide</source>
        <translation>ContextLens 用户指南</translation>
    </message>
    <message>
        <source>Action</source>
        <translation>操作</translation>
    </message>
    <message>
        <source>Keys</source>
        <translation>按键</translation>
    </message>
    <message>
        <source>Keyboard Shortcuts</source>
        <translation>键盘快捷键</translation>
    </message>
    <message>
        <source>(load a model)</source>
        <translation>（请加载模型）</translation>
    </message>
    <message>
        <source>ContextLens {0}
llama-cpp-python {1}
llama.cpp build: {2}
Qt (PySide6) {3}</source>
        <translation>ContextLens {0}
llama-cpp-python {1}
llama.cpp 构建：{2}
Qt (PySide6) {3}</translation>
    </message>
    <message>
        <source>About ContextLens</source>
        <translation>关于 ContextLens</translation>
    </message>
</context>
<context>
    <name>HistoryButtons</name>
    <message>
        <source>Open</source>
        <translation>打开</translation>
    </message>
    <message>
        <source>&amp;Diff</source>
        <translation>差异(&amp;D)</translation>
    </message>
    <message>
        <source>Branch…</source>
        <translation>创建分支…</translation>
    </message>
    <message>
        <source>Delete</source>
        <translation>删除</translation>
    </message>
    <message>
        <source>Undo Delete</source>
        <translation>撤销删除</translation>
    </message>
    <message>
        <source>&amp;Export…</source>
        <translation>导出(&amp;E)…</translation>
    </message>
    <message>
        <source>Include KV states</source>
        <translation>包含 KV 状态</translation>
    </message>
    <message>
        <source>Exports carry the saved KV states, so rollbacks stay instant elsewhere</source>
        <translation>导出时附带已保存的 KV 状态，在其他地方回滚也能即时完成</translation>
    </message>
    <message>
        <source>&amp;Import…</source>
        <translation>导入(&amp;I)…</translation>
    </message>
    <message>
        <source>Rollbac&amp;k {0}</source>
        <translation>回滚 {0}(&amp;K)</translation>
    </message>
    <message>
        <source>Rollbac&amp;k</source>
        <translation>回滚(&amp;K)</translation>
    </message>
    <message>
        <source>The history database is read-only: nothing can be changed.</source>
        <translation>历史数据库为只读：无法进行任何修改。</translation>
    </message>
    <message>
        <source>A saved KV state: the rollback resumes instantly</source>
        <translation>已保存 KV 状态：回滚可即时继续</translation>
    </message>
    <message>
        <source>A new version equal to the selected one; nothing after it is lost</source>
        <translation>新建一个与所选版本相同的版本；其后的内容不会丢失</translation>
    </message>
    <message>
        <source>A new version from the selected one, with a new prompt</source>
        <translation>基于所选版本、使用新提示词新建一个版本</translation>
    </message>
    <message>
        <source>Hide the selection; Undo brings it back until you quit</source>
        <translation>隐藏所选项；退出前可通过撤销恢复</translation>
    </message>
    <message>
        <source>Bring back what was deleted last</source>
        <translation>恢复最近删除的内容</translation>
    </message>
    <message>
        <source>Add a session from a .ctxlens file</source>
        <translation>从 .ctxlens 文件添加会话</translation>
    </message>
    <message>
        <source>Compare two selected versions: settings, prompt and reply</source>
        <translation>比较所选的两个版本：设置、提示词和回复</translation>
    </message>
    <message>
        <source>Show the selected version&apos;s reply in the output buffer (double-click does too)</source>
        <translation>在输出缓冲区中显示所选版本的回复（双击也可以）</translation>
    </message>
    <message>
        <source>Write the session to a .ctxlens file</source>
        <translation>将会话写入 .ctxlens 文件</translation>
    </message>
</context>
<context>
    <name>HistoryColumns</name>
    <message>
        <source>Version</source>
        <translation>版本</translation>
    </message>
    <message>
        <source>Created</source>
        <translation>创建时间</translation>
    </message>
    <message>
        <source>Task</source>
        <translation>任务</translation>
    </message>
    <message>
        <source>Prompt / question</source>
        <translation>提示词 / 问题</translation>
    </message>
    <message>
        <source>Strategy</source>
        <translation>策略</translation>
    </message>
    <message>
        <source>Settings</source>
        <translation>设置</translation>
    </message>
    <message>
        <source>Finish</source>
        <translation>结束</translation>
    </message>
    <message>
        <source>Reply</source>
        <translation>回复</translation>
    </message>
    <message>
        <source>KV state</source>
        <translation>KV 状态</translation>
    </message>
    <message>
        <source>1 version</source>
        <translation>1 个版本</translation>
    </message>
    <message>
        <source>{0} versions</source>
        <translation>{0} 个版本</translation>
    </message>
    <message>
        <source>{0} (#{1})</source>
        <translation>{0}（#{1}）</translation>
    </message>
    <message>
        <source>v{0} (cancelled)</source>
        <translation>v{0}（已取消）</translation>
    </message>
    <message>
        <source>{0} · {1}</source>
        <translation>{0} · {1}</translation>
    </message>
    <message>
        <source>{0} · {1:,} + {2:,} tokens</source>
        <translation>{0} · {1:,} + {2:,} 个 token</translation>
    </message>
    <message>
        <source>{0} instant</source>
        <translation>{0} 即时</translation>
    </message>
    <message>
        <source>Version #{0} of session #{1}: its run was cancelled, so its reply is cut short</source>
        <translation>会话 #{1} 的版本 #{0}：它的运行已被取消，回复不完整</translation>
    </message>
    <message>
        <source>Version #{0} of session #{1}</source>
        <translation>会话 #{1} 的版本 #{0}</translation>
    </message>
    <message>
        <source>n_ctx {0} · max {1}</source>
        <translation>n_ctx {0} · 最多 {1}</translation>
    </message>
    <message>
        <source>temperature {0:g} · seed {1}</source>
        <translation>温度 {0:g} · 种子 {1}</translation>
    </message>
    <message>
        <source>its own</source>
        <translation>本版本的</translation>
    </message>
    <message>
        <source>that of the version it equals (#{0})</source>
        <translation>与之相同的版本（#{0}）的</translation>
    </message>
    <message>
        <source>A rollback resumes from a saved KV state ({0}): {1:,} prompt tokens, context {2:,}, {3} cache, {4:,.1f} MiB; the prompt is not evaluated again.</source>
        <translation>回滚将从{0}已保存 KV 状态继续：提示词 {1:,} 个 token，上下文 {2:,}，{3} 缓存，{4:,.1f} MiB；无需重新计算提示词。</translation>
    </message>
</context>
<context>
    <name>HistoryPanel</name>
    <message>
        <source>Refresh</source>
        <translation>刷新</translation>
    </message>
    <message>
        <source>Delete</source>
        <translation>删除</translation>
    </message>
    <message>
        <source>Undo Delete</source>
        <translation>撤销删除</translation>
    </message>
    <message>
        <source>This history is read-only: it can be browsed and exported, not changed.</source>
        <translation>此历史记录为只读：可以浏览和导出，但不能修改。</translation>
    </message>
    <message>
        <source>Select exactly two versions to compare.</source>
        <translation>请恰好选择两个版本进行比较。</translation>
    </message>
    <message>
        <source>v{0} → v{1}</source>
        <translation>v{0} → v{1}</translation>
    </message>
    <message>
        <source>Rolled back to v{0} as v{1}: it resumes instantly from the saved KV state.</source>
        <translation>已回滚到 v{0}，新版本为 v{1}：将从已保存的 KV 状态即时继续。</translation>
    </message>
    <message>
        <source>Rolled back to v{0} as v{1}: its recorded reply is shown, and Run generates it again.</source>
        <translation>已回滚到 v{0}，新版本为 v{1}：显示的是记录下的回复，点击运行会重新生成。</translation>
    </message>
    <message>
        <source>v{0} branched from v{1}.</source>
        <translation>已从 v{1} 创建分支 v{0}。</translation>
    </message>
    <message>
        <source>Deleted {0} item(s); Undo Delete brings them back until you quit.</source>
        <translation>已删除 {0} 项；退出前可通过“撤销删除”恢复。</translation>
    </message>
    <message>
        <source>Nothing to undo.</source>
        <translation>没有可撤销的操作。</translation>
    </message>
    <message>
        <source>version</source>
        <translation>版本</translation>
    </message>
    <message>
        <source>session</source>
        <translation>会话</translation>
    </message>
    <message>
        <source>The {0} #{1} is back.</source>
        <translation>{0} #{1} 已恢复。</translation>
    </message>
    <message>
        <source>Choose a session to export (above, or select one of its versions).</source>
        <translation>请选择要导出的会话（在上方选择，或选中它的某个版本）。</translation>
    </message>
    <message>
        <source>Select one version to open.</source>
        <translation>请选择一个要打开的版本。</translation>
    </message>
</context>
<context>
    <name>HubFetchDialog</name>
    <message>
        <source>Get a Model from Hugging Face</source>
        <translation>从 Hugging Face 获取模型</translation>
    </message>
    <message>
        <source>Get a model from Hugging Face: org/repo:Q4_K_M or a link</source>
        <translation>从 Hugging Face 获取模型：org/repo:Q4_K_M 或链接</translation>
    </message>
    <message>
        <source>org/repo:Q4_K_M</source>
        <translation>org/repo:Q4_K_M</translation>
    </message>
    <message>
        <source>the Hugging Face cache, where the model list finds it</source>
        <translation>Hugging Face 缓存（模型列表会在那里找到它）</translation>
    </message>
    <message>
        <source>The model comes from {0} into {1}. A quantization such as Q4_K_M picks the matching .gguf file; an interrupted download resumes.</source>
        <translation>模型从 {0} 下载到 {1}。Q4_K_M 这样的量化名会选中对应的 .gguf 文件；中断的下载会续传。</translation>
    </message>
    <message>
        <source>only for a gated or private model; kept in the system keyring</source>
        <translation>仅用于受限或私有模型；保存在系统密钥环中</translation>
    </message>
    <message>
        <source>Hugging Face &amp;token:</source>
        <translation>Hugging Face 令牌(&amp;T)：</translation>
    </message>
    <message>
        <source>Type a model&apos;s name first, such as bartowski/SmolLM2-135M-Instruct-GGUF:Q4_K_M.</source>
        <translation>请先输入模型名称，例如 bartowski/SmolLM2-135M-Instruct-GGUF:Q4_K_M。</translation>
    </message>
    <message>
        <source>Asking {0} for the files…</source>
        <translation>正在向 {0} 询问文件列表…</translation>
    </message>
    <message>
        <source>Could not get the model: {0}</source>
        <translation>无法获取模型：{0}</translation>
    </message>
</context>
<context>
    <name>JobRequests</name>
    <message>
        <source>Choose two to four strategies to compare (Compare menu).</source>
        <translation>请选择二至四个策略进行比较（“比较”菜单）。</translation>
    </message>
</context>
<context>
    <name>KVBar</name>
    <message>
        <source>Free: {0:,} of {1:,} positions</source>
        <translation>空闲：{0:,} / {1:,} 个位置</translation>
    </message>
    <message>
        <source>Document chunk, characters {0:,}–{1:,}</source>
        <translation>文档分块，字符 {0:,}–{1:,}</translation>
    </message>
    <message>
        <source>Pinned prefix: chat template, task and any text carried in front of the document</source>
        <translation>固定前缀：聊天模板、任务以及放在文档前面的其他文本</translation>
    </message>
    <message>
        <source>Context text without a document span</source>
        <translation>不对应文档片段的上下文文本</translation>
    </message>
    <message>
        <source>Question and the reply&apos;s turn markers</source>
        <translation>问题及回复的轮次标记</translation>
    </message>
    <message>
        <source>Generated output</source>
        <translation>生成的输出</translation>
    </message>
    <message>
        <source>Notes the model wrote on earlier parts, kept in the cache (evicted last)</source>
        <translation>模型对前面各部分写下的笔记，保留在缓存中（最后才被逐出）</translation>
    </message>
    <message>
        <source>KV positions {0:,}–{1:,} ({2:,} tokens)</source>
        <translation>KV 位置 {0:,}–{1:,}（{2:,} 个 token）</translation>
    </message>
    <message>
        <source>Behind the sliding window: {0} of {1} layers attend to the last {2:,} positions only, so {3} layer(s) still see this text</source>
        <translation>位于滑动窗口之外：{1} 层中有 {0} 层只关注最后 {2:,} 个位置，因此仅 {3} 层仍能看到这段文字</translation>
    </message>
    <message>
        <source>Partly behind the sliding window (positions before {0:,}): {1}</source>
        <translation>部分位于滑动窗口之外（{0:,} 之前的位置）：{1}</translation>
    </message>
</context>
<context>
    <name>KVStage</name>
    <message>
        <source>Lane {0}</source>
        <translation>通道 {0}</translation>
    </message>
    <message>
        <source>{0} lanes: {1} of {2:,} positions each</source>
        <translation>{0} 个通道：各占用 {1} / {2:,} 个位置</translation>
    </message>
    <message>
        <source>{0:,} of {1:,} positions in use</source>
        <translation>已使用 {0:,} / {1:,} 个位置</translation>
    </message>
    <message>
        <source>sliding window of {0:,} on {1} of {2} layers</source>
        <translation>滑动窗口 {0:,}，作用于 {2} 层中的 {1} 层</translation>
    </message>
    <message>
        <source>(hatched: {0:,} positions only the other {1} see)</source>
        <translation>（阴影：{0:,} 个位置仅其余 {1} 层可见）</translation>
    </message>
</context>
<context>
    <name>Language</name>
    <message>
        <source>&amp;System</source>
        <translation>跟随系统(&amp;S)</translation>
    </message>
    <message>
        <source>&amp;Language</source>
        <translation>语言(&amp;L)</translation>
    </message>
</context>
<context>
    <name>LoadOptions</name>
    <message>
        <source>Load options</source>
        <translation>加载选项</translation>
    </message>
    <message>
        <source>Tokens the model can hold at once (n_ctx)</source>
        <translation>模型一次能容纳的 token 数（n_ctx）</translation>
    </message>
    <message>
        <source>Quantized types (q8_0 … iq4_nl) take less memory and need flash attention</source>
        <translation>量化类型（q8_0 … iq4_nl）占用内存更少，但需要 Flash Attention</translation>
    </message>
    <message>
        <source>Flash attention</source>
        <translation>启用 Flash Attention</translation>
    </message>
    <message>
        <source>Prompt tokens handed to llama.cpp at once (n_batch)</source>
        <translation>一次交给 llama.cpp 的提示词 token 数（n_batch）</translation>
    </message>
    <message>
        <source>Tokens computed in one step (n_ubatch)</source>
        <translation>一步计算的 token 数（n_ubatch）</translation>
    </message>
    <message>
        <source>Co&amp;ntext size:</source>
        <translation>上下文大小(&amp;N)：</translation>
    </message>
    <message>
        <source>&amp;GPU layers:</source>
        <translation>GPU 层数(&amp;G)：</translation>
    </message>
    <message>
        <source>Backend:</source>
        <translation>后端：</translation>
    </message>
    <message>
        <source>KV cache type:</source>
        <translation>KV 缓存类型：</translation>
    </message>
    <message>
        <source>Threads:</source>
        <translation>线程数：</translation>
    </message>
    <message>
        <source>The most CPU threads llama.cpp computes with (the physical cores by default); it uses fewer while other programs keep cores busy</source>
        <translation>llama.cpp 计算时最多使用的 CPU 线程数（默认为物理核心数）；其他程序占用核心时会使用更少的线程</translation>
    </message>
    <message>
        <source>Batch, micro-batch:</source>
        <translation>批大小、微批大小：</translation>
    </message>
    <message>
        <source>Load the model again with this context size</source>
        <translation>以此上下文大小重新加载模型</translation>
    </message>
    <message>
        <source>A quantized KV cache ({0}) needs flash attention, so it was turned on.</source>
        <translation>量化 KV 缓存（{0}）需要 Flash Attention，因此已将其开启。</translation>
    </message>
    <message>
        <source>A context size can be at most {0:,} tokens.</source>
        <translation>上下文大小最多为 {0:,} 个token。</translation>
    </message>
    <message>
        <source>Above the model&apos;s trained context of {0:,} tokens: answers may degrade.</source>
        <translation>超过模型训练时的上下文（{0:,} 个token）：回答质量可能下降。</translation>
    </message>
    <message>
        <source>Reload with {0:,}</source>
        <translation>以 {0:,} 重新加载</translation>
    </message>
    <message>
        <source>all {0}</source>
        <translation>全部 {0} 层</translation>
    </message>
    <message>
        <source>{0} of {1}</source>
        <translation>{0} / {1}</translation>
    </message>
    <message>
        <source>Checking whether this build can use a GPU…</source>
        <translation>正在检查此构建能否使用 GPU…</translation>
    </message>
    <message>
        <source>This llama.cpp build runs on the CPU only: it cannot offload layers to a GPU.</source>
        <translation>此 llama.cpp 构建只能在 CPU 上运行：无法将层卸载到 GPU。</translation>
    </message>
    <message>
        <source>Layers to run on the GPU</source>
        <translation>在 GPU 上运行的层数</translation>
    </message>
    <message>
        <source>checking…</source>
        <translation>正在检查…</translation>
    </message>
    <message>
        <source>CPU only</source>
        <translation>仅 CPU</translation>
    </message>
    <message>
        <source>%1 + CPU (GPU offload available)</source>
        <translation>%1 + CPU（可卸载到 GPU）</translation>
    </message>
    <message>
        <source>%1 + CPU (no GPU offload)</source>
        <translation>%1 + CPU（不可卸载到 GPU）</translation>
    </message>
    <message>
        <source>llama.cpp %1 — %2</source>
        <translation>llama.cpp %1 — %2</translation>
    </message>
</context>
<context>
    <name>MainActions</name>
    <message>
        <source>Job</source>
        <translation>作业</translation>
    </message>
    <message>
        <source>Go to the &amp;Document</source>
        <translation>转到文档(&amp;D)</translation>
    </message>
    <message>
        <source>Go to the &amp;Model</source>
        <translation>转到模型(&amp;M)</translation>
    </message>
    <message>
        <source>Go to the &amp;Three-Stage Buffer</source>
        <translation>转到三级缓冲区(&amp;T)</translation>
    </message>
    <message>
        <source>Go to the &amp;History</source>
        <translation>转到历史(&amp;H)</translation>
    </message>
    <message>
        <source>&amp;Help</source>
        <translation>帮助(&amp;H)</translation>
    </message>
    <message>
        <source>ContextLens &amp;User Guide</source>
        <translation>ContextLens 用户指南(&amp;U)</translation>
    </message>
    <message>
        <source>&amp;Keyboard Shortcuts</source>
        <translation>键盘快捷键(&amp;K)</translation>
    </message>
    <message>
        <source>&amp;About ContextLens</source>
        <translation>关于 ContextLens(&amp;A)</translation>
    </message>
    <message>
        <source>&amp;File</source>
        <translation>文件(&amp;F)</translation>
    </message>
    <message>
        <source>&amp;Open Document…</source>
        <translation>打开文档(&amp;O)…</translation>
    </message>
    <message>
        <source>Open &amp;Recent</source>
        <translation>最近打开(&amp;R)</translation>
    </message>
    <message>
        <source>Get the &amp;Default Model…</source>
        <translation>获取默认模型(&amp;D)…</translation>
    </message>
    <message>
        <source>Get a Model from &amp;Hugging Face…</source>
        <translation>从 &amp;Hugging Face 获取模型…</translation>
    </message>
    <message>
        <source>&amp;Quit</source>
        <translation>退出(&amp;Q)</translation>
    </message>
    <message>
        <source>What the model does with the document</source>
        <translation>模型要对文档做什么</translation>
    </message>
    <message>
        <source> &amp;Task </source>
        <translation> 任务(&amp;T) </translation>
    </message>
    <message>
        <source>Question or instruction</source>
        <translation>问题或指令</translation>
    </message>
    <message>
        <source>A question to ask, or the instruction for extract. Several questions: paste them one per line, or use Several…</source>
        <translation>要问的问题，或提取任务的指令。多个问题：每行粘贴一个，或使用多个…</translation>
    </message>
    <message>
        <source>Several…</source>
        <translation>多个…</translation>
    </message>
    <message>
        <source>Ask several questions at once, one per line: their plans side by side, each answer its own version</source>
        <translation>一次提出多个问题，每行一个：并排显示各自的计划，每个回答成为单独的版本</translation>
    </message>
    <message>
        <source>What to do with a document longer than the context</source>
        <translation>文档超出上下文长度时的处理方式</translation>
    </message>
    <message>
        <source> &amp;Strategy </source>
        <translation> 策略(&amp;S) </translation>
    </message>
    <message>
        <source>Longest reply, in tokens (kept free in the context)</source>
        <translation>回复的最大长度（token 数，会在上下文中预留）</translation>
    </message>
    <message>
        <source> Rep&amp;ly </source>
        <translation> 回复(&amp;L) </translation>
    </message>
    <message>
        <source>&amp;Run</source>
        <translation>运行(&amp;R)</translation>
    </message>
    <message>
        <source>Com&amp;pare</source>
        <translation>比较(&amp;P)</translation>
    </message>
    <message>
        <source>&amp;Compare</source>
        <translation>比较(&amp;C)</translation>
    </message>
    <message>
        <source>&amp;Cancel</source>
        <translation>取消(&amp;C)</translation>
    </message>
    <message>
        <source>Needles: a | b</source>
        <translation>针：a | b</translation>
    </message>
    <message>
        <source>Needles: facts to track, texts from the document separated by |; Compare shows the share that reaches the model</source>
        <translation>针：要追踪的事实，取自文档的文本，用 | 分隔；“比较”会显示其中送入模型的比例</translation>
    </message>
    <message>
        <source>&amp;Job</source>
        <translation>作业(&amp;J)</translation>
    </message>
    <message>
        <source>&amp;Audit Each Run Against llama.cpp</source>
        <translation>每次运行后对照 llama.cpp 审计(&amp;A)</translation>
    </message>
    <message>
        <source>Check after each model call that llama.cpp holds exactly the plan shown</source>
        <translation>每次调用模型后检查 llama.cpp 中的内容与所示计划完全一致</translation>
    </message>
    <message>
        <source>Cancel</source>
        <translation>取消</translation>
    </message>
    <message>
        <source>Map Phase in Parallel &amp;Lanes</source>
        <translation>map 阶段并行通道(&amp;L)</translation>
    </message>
    <message>
        <source>&amp;One Window at a Time</source>
        <translation>一次一个窗口(&amp;O)</translation>
    </message>
    <message>
        <source>&amp;{0} Lanes</source>
        <translation>&amp;{0} 个通道</translation>
    </message>
    <message>
        <source>Generate the replies of a map phase this many at a time; each lane holds a context of its own</source>
        <translation>map 阶段同时生成这么多个回复；每个通道有自己的上下文</translation>
    </message>
    <message>
        <source>&amp;View</source>
        <translation>视图(&amp;V)</translation>
    </message>
    <message>
        <source>Th&amp;eme</source>
        <translation>主题(&amp;E)</translation>
    </message>
    <message>
        <source>&amp;System</source>
        <translation>跟随系统(&amp;S)</translation>
    </message>
    <message>
        <source>&amp;Light</source>
        <translation>浅色(&amp;L)</translation>
    </message>
    <message>
        <source>&amp;Dark</source>
        <translation>深色(&amp;D)</translation>
    </message>
</context>
<context>
    <name>MainWindow</name>
    <message>
        <source>Model</source>
        <translation>模型</translation>
    </message>
    <message>
        <source>Sampling</source>
        <translation>采样</translation>
    </message>
    <message>
        <source>&amp;Buffers</source>
        <translation>缓冲区(&amp;B)</translation>
    </message>
    <message>
        <source>Comp&amp;are</source>
        <translation>比较(&amp;A)</translation>
    </message>
    <message>
        <source>Histor&amp;y</source>
        <translation>历史(&amp;Y)</translation>
    </message>
    <message>
        <source>Three-stage buffer</source>
        <translation>三级缓冲区</translation>
    </message>
    <message>
        <source>Gauges</source>
        <translation>仪表盘</translation>
    </message>
    <message>
        <source>Questions</source>
        <translation>问题</translation>
    </message>
    <message>
        <source>v{0} ({1}, {2}) resumed from its saved KV state: {3:,} prompt token(s) evaluated</source>
        <translation>v{0}（{1}，{2}）已从保存的 KV 状态恢复：评估了 {3:,} 个提示词 token</translation>
    </message>
    <message>
        <source>ContextLens</source>
        <translation>ContextLens</translation>
    </message>
    <message>
        <source>Unexpected error (details in the log): {0}: {1}</source>
        <translation>意外错误（详情见日志）：{0}：{1}</translation>
    </message>
    <message>
        <source>A run is going on. Quit anyway? The run is cancelled.</source>
        <translation>正在进行一次运行。仍要退出吗？运行会被取消。</translation>
    </message>
    <message>
        <source>&amp;Quit</source>
        <translation>退出(&amp;Q)</translation>
    </message>
    <message>
        <source>&amp;Keep Running</source>
        <translation>继续运行(&amp;K)</translation>
    </message>
    <message>
        <source>Resuming v{0} ({1}, {2}) from its saved KV state…</source>
        <translation>正在从已保存的 KV 状态恢复 v{0}（{1}，{2}）…</translation>
    </message>
</context>
<context>
    <name>MemoryFit</name>
    <message>
        <source>Estimated before loading from the model&apos;s shape (weights, KV cache, compute buffers: within a few percent of what llama.cpp allocates) against the memory free now. Live figures come from llama.cpp once loaded.</source>
        <translation>加载前根据模型结构估算（权重、KV 缓存、计算缓冲区：与 llama.cpp 实际分配相差几个百分点以内），并与当前可用内存比较。加载后显示 llama.cpp 的实时数据。</translation>
    </message>
    <message>
        <source>The memory it takes could not be estimated: {0}</source>
        <translation>无法估算所需内存：{0}</translation>
    </message>
    <message>
        <source>Estimating the memory it takes…</source>
        <translation>正在估算所需内存…</translation>
    </message>
    <message>
        <source>KV cache: choose a model to see the memory it takes.</source>
        <translation>KV 缓存：选择模型后可查看其占用的内存。</translation>
    </message>
    <message>
        <source>Fits: {0} of {1} free at n_ctx {2:,}, {3} KV cache</source>
        <translation>可以容纳：在 n_ctx {2:,}、{3} KV 缓存下需要 {0}，可用 {1}</translation>
    </message>
    <message>
        <source>Does not fit: {0} needed, {1} free at n_ctx {2:,}, {3} KV cache</source>
        <translation>无法容纳：在 n_ctx {2:,}、{3} KV 缓存下需要 {0}，可用 {1}</translation>
    </message>
    <message>
        <source>; {0} of {1} free on the GPU</source>
        <translation>；GPU 上需要 {0}，可用 {1}</translation>
    </message>
    <message>
        <source>weights {0}, KV cache {1}, compute {2}</source>
        <translation>权重 {0}，KV 缓存 {1}，计算 {2}</translation>
    </message>
</context>
<context>
    <name>ModelCard</name>
    <message>
        <source>Model</source>
        <translation>模型</translation>
    </message>
    <message>
        <source>Name:</source>
        <translation>名称：</translation>
    </message>
    <message>
        <source>File:</source>
        <translation>文件：</translation>
    </message>
    <message>
        <source>Architecture:</source>
        <translation>架构：</translation>
    </message>
    <message>
        <source>Parameters:</source>
        <translation>参数量：</translation>
    </message>
    <message>
        <source>Quantization:</source>
        <translation>量化：</translation>
    </message>
    <message>
        <source>Context trained:</source>
        <translation>训练上下文：</translation>
    </message>
    <message>
        <source>Layers:</source>
        <translation>层数：</translation>
    </message>
    <message>
        <source>Attention:</source>
        <translation>注意力：</translation>
    </message>
    <message>
        <source>Kind:</source>
        <translation>类型：</translation>
    </message>
    <message>
        <source>Loaded:</source>
        <translation>已加载：</translation>
    </message>
    <message>
        <source>{0} ({1} MiB, GGUF v{2})</source>
        <translation>{0}（{1} MiB，GGUF v{2}）</translation>
    </message>
    <message>
        <source>base model: replies continue the text; instructions may be ignored</source>
        <translation>基础模型：回复会续写文本，可能不会遵循指令</translation>
    </message>
    <message>
        <source>chat model (it has a chat template)</source>
        <translation>对话模型（带有对话模板）</translation>
    </message>
    <message>
        <source>{0:,} bytes ({1})</source>
        <translation>{0:,} 字节（{1}）</translation>
    </message>
    <message>
        <source>unknown</source>
        <translation>未知</translation>
    </message>
    <message>
        <source>no</source>
        <translation>否</translation>
    </message>
    <message>
        <source>sliding window of {0:,} tokens on {1} of {2} layers</source>
        <translation>{2} 层中有 {1} 层使用 {0:,} token 的滑动窗口</translation>
    </message>
    <message>
        <source>KV per token:</source>
        <translation>每个 token 的 KV：</translation>
    </message>
    <message>
        <source>full attention on all {0} layers</source>
        <translation>全部 {0} 层均为全注意力</translation>
    </message>
    <message>
        <source>context {0:,}, KV {1}, {2} GPU layers, in {3:.2f} s</source>
        <translation>上下文 {0:,}，KV {1}，{2} 层在 GPU 上，用时 {3:.2f} 秒</translation>
    </message>
</context>
<context>
    <name>ModelChooser</name>
    <message>
        <source>&amp;Models:</source>
        <translation>模型(&amp;M)：</translation>
    </message>
    <message>
        <source>Bro&amp;wse…</source>
        <translation>浏览(&amp;W)…</translation>
    </message>
    <message>
        <source>Choose a GGUF file anywhere on disk</source>
        <translation>在磁盘上任意位置选择 GGUF 文件</translation>
    </message>
    <message>
        <source>Add Folder…</source>
        <translation>添加文件夹…</translation>
    </message>
    <message>
        <source>List the GGUF models in a folder of yours too (they stay where they are)</source>
        <translation>同时列出您某个文件夹中的 GGUF 模型（文件保持原位）</translation>
    </message>
    <message>
        <source>Get the Default Model…</source>
        <translation>获取默认模型…</translation>
    </message>
    <message>
        <source>Download the default model (about 98 MB) and check it against its checksum</source>
        <translation>下载默认模型（约 98 MB）并用校验和检查</translation>
    </message>
    <message>
        <source>Choose a Model</source>
        <translation>选择模型</translation>
    </message>
    <message>
        <source>GGUF models (*.gguf);;All files (*)</source>
        <translation>GGUF 模型 (*.gguf);;所有文件 (*)</translation>
    </message>
    <message>
        <source>Add a Folder of Models</source>
        <translation>添加模型文件夹</translation>
    </message>
    <message>
        <source>only {0} of its {1} parts are here, and llama.cpp needs them all</source>
        <translation>只有 {1} 个分片中的 {0} 个在这里，而 llama.cpp 需要全部分片</translation>
    </message>
    <message>
        <source>ContextLens models folder</source>
        <translation>ContextLens 模型文件夹</translation>
    </message>
    <message>
        <source>LM Studio</source>
        <translation>LM Studio</translation>
    </message>
    <message>
        <source>Ollama</source>
        <translation>Ollama</translation>
    </message>
    <message>
        <source>Hugging Face cache</source>
        <translation>Hugging Face 缓存</translation>
    </message>
    <message>
        <source>llama.cpp cache</source>
        <translation>llama.cpp 缓存</translation>
    </message>
    <message>
        <source>GPT4All</source>
        <translation>GPT4All</translation>
    </message>
    <message>
        <source>Jan</source>
        <translation>Jan</translation>
    </message>
    <message>
        <source>Added folders</source>
        <translation>添加的文件夹</translation>
    </message>
    <message>
        <source>Chosen files</source>
        <translation>选择的文件</translation>
    </message>
    <message>
        <source>not a GGUF model llama.cpp can read</source>
        <translation>不是 llama.cpp 能读取的 GGUF 模型</translation>
    </message>
    <message>
        <source>{0} of {1} parts present</source>
        <translation>{1} 个分片中有 {0} 个</translation>
    </message>
    <message>
        <source>Trained context: {0:,} tokens</source>
        <translation>训练上下文：{0:,} 个词元</translation>
    </message>
    <message>
        <source>Family: {0}</source>
        <translation>架构：{0}</translation>
    </message>
    <message>
        <source>{0} of {1} parts present: it cannot be loaded</source>
        <translation>{1} 个分片中只有 {0} 个：无法加载</translation>
    </message>
    <message>
        <source>Also found as: {0}</source>
        <translation>也以此名称出现：{0}</translation>
    </message>
    <message numerus="yes">
        <source>Skipped %n file(s) that are not GGUF models llama.cpp can read; hover to see why.</source>
        <translation>
            <numerusform>已跳过 %n 个不是 llama.cpp 能读取的 GGUF 模型的文件；悬停查看原因。</numerusform>
        </translation>
    </message>
    <message>
        <source>Copy Path</source>
        <translation>复制路径</translation>
    </message>
    <message>
        <source>Stop Listing {0}</source>
        <translation>不再列出 {0}</translation>
    </message>
</context>
<context>
    <name>ModelFetchDialog</name>
    <message>
        <source>Get the Default Model</source>
        <translation>获取默认模型</translation>
    </message>
    <message>
        <source>ContextLens will download {0} ({1:,.0f} MB) from {2} into {3}. The file is checked against its published SHA-256 checksum before it is used.</source>
        <translation>ContextLens 将从 {2} 下载 {0}（{1:,.0f} MB）到 {3}。使用前会用其公布的 SHA-256 校验和检查该文件。</translation>
    </message>
    <message>
        <source>From &amp;Hugging Face…</source>
        <translation>从 &amp;Hugging Face…</translation>
    </message>
    <message>
        <source>Get another model by name from the Hugging Face Hub</source>
        <translation>按名称从 Hugging Face Hub 获取其他模型</translation>
    </message>
    <message>
        <source>Asking {0} for the file…</source>
        <translation>正在向 {0} 请求文件…</translation>
    </message>
    <message>
        <source>Could not get the default model: {0}</source>
        <translation>无法获取默认模型：{0}</translation>
    </message>
</context>
<context>
    <name>ModelOffer</name>
    <message>
        <source>The model is still loading; the run starts once it is ready.</source>
        <translation>模型仍在加载；加载完成后即开始运行。</translation>
    </message>
    <message>
        <source>No model is loaded. Load {0} and run?</source>
        <translation>尚未加载模型。加载 {0} 并运行？</translation>
    </message>
    <message>
        <source>It loads with the context size shown in the model panel.</source>
        <translation>将按模型面板中显示的上下文大小加载。</translation>
    </message>
    <message>
        <source>&amp;Load and Run</source>
        <translation>加载并运行(&amp;L)</translation>
    </message>
    <message>
        <source>No model is loaded, and the default model is not on this computer yet.</source>
        <translation>尚未加载模型，且本机上还没有默认模型。</translation>
    </message>
    <message>
        <source>Get it now (about 98 MB, checked against its checksum), then Run again.</source>
        <translation>现在获取（约 98 MB，会核对校验和），然后再次运行。</translation>
    </message>
    <message>
        <source>&amp;Get the Default Model…</source>
        <translation>获取默认模型(&amp;G)…</translation>
    </message>
    <message>
        <source>ContextLens</source>
        <translation>ContextLens</translation>
    </message>
</context>
<context>
    <name>ModelPanel</name>
    <message>
        <source>Reading {0}…</source>
        <translation>正在读取 {0}…</translation>
    </message>
    <message>
        <source>{0} cannot be used: {1}</source>
        <translation>无法使用 {0}：{1}</translation>
    </message>
    <message>
        <source>Measured now</source>
        <translation>刚刚测量</translation>
    </message>
    <message>
        <source>{0}: loading with the values above</source>
        <translation>{0}：使用上方的值加载</translation>
    </message>
</context>
<context>
    <name>ModelStatus</name>
    <message>
        <source>L&amp;oad</source>
        <translation>加载(&amp;O)</translation>
    </message>
    <message>
        <source>&amp;Unload</source>
        <translation>卸载(&amp;U)</translation>
    </message>
    <message>
        <source>Loading…</source>
        <translation>正在加载…</translation>
    </message>
    <message>
        <source>Connected to a pool of {0} servers: model {1}, context {2:,} tokens.</source>
        <translation>已连接到由 {0} 台服务器组成的池：模型 {1}，上下文 {2:,} 个 token。</translation>
    </message>
    <message>
        <source>Connected to {0}: model {1}, context {2:,} tokens.</source>
        <translation>已连接到 {0}：模型 {1}，上下文 {2:,} 个 token。</translation>
    </message>
    <message>
        <source>Calibrating: {0}/{1} settings tried…</source>
        <translation>正在校准：已尝试 {0}/{1} 组设置…</translation>
    </message>
    <message>
        <source>No model loaded.</source>
        <translation>未加载模型。</translation>
    </message>
    <message>
        <source>Loaded {0}: context {1:,} tokens.</source>
        <translation>已加载 {0}：上下文 {1:,} 个 token。</translation>
    </message>
</context>
<context>
    <name>NoModelBanner</name>
    <message>
        <source>No model is loaded: {0} model(s) found on this computer; choose one in the model panel, then Load.</source>
        <translation>尚未加载模型：在这台计算机上找到 {0} 个模型；请在模型面板中选择一个，然后加载。</translation>
    </message>
    <message>
        <source>Choose a Model</source>
        <translation>选择模型</translation>
    </message>
    <message>
        <source>No model yet: ContextLens needs a GGUF model to answer; get the default one ({0:,.0f} MB) or drop a .gguf file on the window.</source>
        <translation>还没有模型：ContextLens 需要一个 GGUF 模型来回答；请获取默认模型（{0:,.0f} MB），或把 .gguf 文件拖到窗口上。</translation>
    </message>
    <message>
        <source>Get the Default Model…</source>
        <translation>获取默认模型…</translation>
    </message>
</context>
<context>
    <name>PlanMap</name>
    <message>
        <source>Plan map</source>
        <translation>计划概览</translation>
    </message>
    <message>
        <source>The whole document: kept, dropped and passes; click to go there</source>
        <translation>整个文档：保留、丢弃的部分和各轮；点击可跳转到该处</translation>
    </message>
</context>
<context>
    <name>PlanReason</name>
    <message>
        <source>fits the budget</source>
        <translation>在预算之内</translation>
    </message>
    <message>
        <source>the document&apos;s chunks need {0} tokens; the budget is {1}</source>
        <translation>文档的各块共需 {0} 个token；预算为 {1}</translation>
    </message>
    <message>
        <source>after the first {0} tokens (head)</source>
        <translation>位于前 {0} 个token之后（head）</translation>
    </message>
    <message>
        <source>the start of the document</source>
        <translation>文档的开头</translation>
    </message>
    <message>
        <source>before the last {0} tokens (tail)</source>
        <translation>位于最后 {0} 个token之前（tail）</translation>
    </message>
    <message>
        <source>the end of the document</source>
        <translation>文档的结尾</translation>
    </message>
    <message>
        <source>the middle of the document, dropped to keep its start and end</source>
        <translation>文档的中间部分，为保留开头和结尾而丢弃</translation>
    </message>
    <message>
        <source>the start or end of the document</source>
        <translation>文档的开头或结尾</translation>
    </message>
    <message>
        <source>passes through the rolling window</source>
        <translation>依次通过滚动窗口</translation>
    </message>
    <message>
        <source>in a sliding window over semantic chunks</source>
        <translation>位于语义分块上的滑动窗口中</translation>
    </message>
    <message>
        <source>mapped in its own pass, then reduced</source>
        <translation>在单独一轮中映射，然后归约</translation>
    </message>
    <message>
        <source>more informative than what was dropped</source>
        <translation>比丢弃的内容信息量更大</translation>
    </message>
    <message>
        <source>whitespace only</source>
        <translation>仅有空白</translation>
    </message>
    <message>
        <source>boilerplate: the same line recurs {0} times</source>
        <translation>样板文字：同一行重复出现 {0} 次</translation>
    </message>
    <message>
        <source>repeats the text at characters {0}–{1}</source>
        <translation>重复了字符 {0}–{1} 处的文本</translation>
    </message>
    <message>
        <source>mostly whitespace ({0})</source>
        <translation>大部分是空白（{0}）</translation>
    </message>
    <message>
        <source>low information: {0} new after compression</source>
        <translation>信息量低：压缩后仅 {0} 为新内容</translation>
    </message>
    <message>
        <source>nothing of the document fits: the budget is {0} tokens</source>
        <translation>文档的任何部分都放不下：预算为 {0} 个token</translation>
    </message>
    <message>
        <source>rank {0} of {1} matching parts (score {2}; terms: {3})</source>
        <translation>匹配片段中排名第 {0}（共 {1} 个；得分 {2}；匹配词：{3}）</translation>
    </message>
    <message>
        <source>rank {0} of {1} matching parts (score {2}), past the budget</source>
        <translation>匹配片段中排名第 {0}（共 {1} 个；得分 {2}），超出预算</translation>
    </message>
    <message>
        <source>the paragraph of the part ranked {0} goes on here</source>
        <translation>排名 {0} 的部分所在段落在此延续</translation>
    </message>
    <message>
        <source>rank {0} of {1} matching parts (score {2}), under 70% of the best ({3})</source>
        <translation>匹配部分中排名 {0}（共 {1} 个，得分 {2}），低于最佳得分（{3}）的 70%</translation>
    </message>
    <message>
        <source>rank {0} of {1} matching parts (score {2}), after the {3} best kept</source>
        <translation>匹配部分中排名 {0}（共 {1} 个，得分 {2}），在已保留的最佳 {3} 个之后</translation>
    </message>
    <message>
        <source>next to the part ranked {0} (context)</source>
        <translation>紧邻排名第 {0} 的片段（上下文）</translation>
    </message>
    <message>
        <source>matches no term of the question</source>
        <translation>与问题中的任何词都不匹配</translation>
    </message>
    <message>
        <source>retrieve needs a question to rank the document against: ask a question, or extract with an instruction</source>
        <translation>检索策略需要一个问题来为文档排序：请提问，或使用带指令的提取任务</translation>
    </message>
    <message>
        <source>a single character here needs {0} tokens, over the budget</source>
        <translation>此处单个字符需要 {0} 个token，超出预算</translation>
    </message>
    <message>
        <source>sentence {0} of the part ranked {1} (score {2}): holds {3}</source>
        <translation>排名第 {1} 的片段中的第 {0} 句（得分 {2}）：含有 {3}</translation>
    </message>
    <message>
        <source>sentence {0} of the part ranked {1} (score {2}): holds {3}; the question asks about {4} (in {5} of the parts)</source>
        <translation>排名第 {1} 的片段中的第 {0} 句（得分 {2}）：含有 {3}；问题所问的是 {4}（出现在 {5} 个片段中）</translation>
    </message>
    <message>
        <source>sentence {0} of the part ranked {1} (score {2}): holds {3}; the question&apos;s rarest: {4} (in {5} of the parts)</source>
        <translation>排名第 {1} 的片段中的第 {0} 句（得分 {2}）：含有 {3}；问题中最少见的词：{4}（出现在 {5} 个片段中）</translation>
    </message>
    <message>
        <source>the sentence before, for the part ranked {0}: the next starts with &apos;{1}&apos;</source>
        <translation>前一句，为排名第 {0} 的片段保留：下一句以 &apos;{1}&apos; 开头</translation>
    </message>
    <message>
        <source>the sentence after, for the part ranked {0}: the one before it ends in a colon (what it introduces follows)</source>
        <translation>后一句，为排名第 {0} 的片段保留：前一句以冒号结尾（其引出的内容在后面）</translation>
    </message>
    <message>
        <source>the sentence after, for the part ranked {0}: the one before it reads as a heading</source>
        <translation>后一句，为排名第 {0} 的片段保留：前一句是标题</translation>
    </message>
    <message>
        <source>the sentence after, for the part ranked {0}: it starts with &apos;{1}&apos;</source>
        <translation>后一句，为排名第 {0} 的片段保留：它以 &apos;{1}&apos; 开头</translation>
    </message>
    <message>
        <source>the text under the heading ranked {0} starts here</source>
        <translation>排名第 {0} 的标题下的正文从这里开始</translation>
    </message>
    <message>
        <source>the rest of the part ranked {0}: no sentence here scores 50% of its best</source>
        <translation>排名第 {0} 的片段的其余部分：这里没有句子达到该片段最佳句子得分的 50%</translation>
    </message>
    <message>
        <source>rank {0} of {1} matching parts (score {2}): no sentence names {3} (what the question asks about)</source>
        <translation>匹配片段中排名第 {0}（共 {1} 个；得分 {2}）：没有句子提到 {3}（问题所问的对象）</translation>
    </message>
    <message>
        <source>rank {0} of {1} matching parts (score {2}): no sentence holds {3} (the question&apos;s rarest) or two of its words</source>
        <translation>匹配片段中排名第 {0}（共 {1} 个；得分 {2}）：没有句子含有 {3}（问题中最少见的词）或问题中的两个词</translation>
    </message>
    <message>
        <source>rank {0} of {1} matching parts (score {2}): no sentence holds the question&apos;s words</source>
        <translation>匹配片段中排名第 {0}（共 {1} 个；得分 {2}）：没有句子含有问题中的词</translation>
    </message>
    <message>
        <source>blank space before the first excerpt</source>
        <translation>第一段摘录之前的空白</translation>
    </message>
</context>
<context>
    <name>QuestionPlansView</name>
    <message>
        <source>Ask several questions under “retrieve” to see their plans side by side.</source>
        <translation>在“retrieve”策略下提出多个问题，即可并排查看它们的计划。</translation>
    </message>
    <message>
        <source>{0} questions, each with its plan under {1} ({2:,} tokens of room): {3} chunk(s), {4:,} tokens, kept by more than one</source>
        <translation>{0} 个问题，各自在 {1} 下有计划（可用 {2:,} 个 token）：{3} 个分块、{4:,} 个 token 被多个问题保留</translation>
    </message>
    <message>
        <source>Q{0}: {1}</source>
        <translation>问{0}：{1}</translation>
    </message>
    <message>
        <source>Shared</source>
        <translation>共享</translation>
    </message>
    <message>
        <source>Total</source>
        <translation>合计</translation>
    </message>
    <message>
        <source>{0:,} tokens kept, {1:,} shared</source>
        <translation>保留 {0:,} 个 token，共享 {1:,} 个</translation>
    </message>
    <message>
        <source>shares {0} of {1} chunks with Q{2}</source>
        <translation>{1} 个分块中有 {0} 个与问{2}共享</translation>
    </message>
    <message>
        <source>{0} with Q{1}</source>
        <translation>与问{1}共享 {0} 个</translation>
    </message>
    <message>
        <source>shares of {0} chunks: {1}</source>
        <translation>{0} 个分块的共享情况：{1}</translation>
    </message>
    <message>
        <source>rank {0}</source>
        <translation>排名 {0}</translation>
    </message>
    <message>
        <source>next to rank {0}</source>
        <translation>紧邻排名 {0}</translation>
    </message>
    <message>
        <source>kept</source>
        <translation>保留</translation>
    </message>
    <message>
        <source>{0:,} tokens · {1}</source>
        <translation>{0:,} 个 token · {1}</translation>
    </message>
    <message>
        <source>Also kept for {0}</source>
        <translation>也为 {0} 保留</translation>
    </message>
</context>
<context>
    <name>ReplyView</name>
    <message>
        <source>Answer to “{0}”</source>
        <translation>对“{0}”的回答</translation>
    </message>
    <message>
        <source>No support in the kept text (best match: score {0:.2f})</source>
        <translation>保留的文本中没有依据（最佳匹配：得分 {0:.2f}）</translation>
    </message>
    <message>
        <source>Source: document characters {0:,}–{1:,}, score {2:.2f} (highlighted in the document)</source>
        <translation>来源：文档字符 {0:,}–{1:,}，得分 {2:.2f}（已在文档中高亮）</translation>
    </message>
    <message>
        <source>Click to highlight the document text this output came from</source>
        <translation>点击以高亮此输出所依据的文档文本</translation>
    </message>
</context>
<context>
    <name>RunStatus</name>
    <message>
        <source>Window {0} of {1}</source>
        <translation>第 {0} 个窗口，共 {1} 个</translation>
    </message>
    <message>
        <source>reply: {0:,} tokens · {1:,.0f} tokens/s</source>
        <translation>回复：{0:,} 个token · 每秒 {1:,.0f} 个</translation>
    </message>
    <message>
        <source>reply: {0:,} tokens</source>
        <translation>回复：{0:,} 个token</translation>
    </message>
    <message>
        <source>about {0} s left</source>
        <translation>约剩 {0} 秒</translation>
    </message>
    <message>
        <source>about {0} min left</source>
        <translation>约剩 {0} 分钟</translation>
    </message>
    <message>
        <source>about {0} h {1} min left</source>
        <translation>约剩 {0} 小时 {1} 分钟</translation>
    </message>
    <message>
        <source>prompt {0:,} of {1:,} tokens</source>
        <translation>提示词 {0:,} / {1:,} 个token</translation>
    </message>
</context>
<context>
    <name>SamplingBox</name>
    <message>
        <source>Deterministic (greedy)</source>
        <translation>确定性（贪心）</translation>
    </message>
    <message>
        <source>Balanced</source>
        <translation>均衡</translation>
    </message>
    <message>
        <source>Creative</source>
        <translation>创意</translation>
    </message>
    <message>
        <source>Custom</source>
        <translation>自定义</translation>
    </message>
    <message>
        <source>Deterministic: always the likeliest token, the same reply every time. Balanced and Creative sample, with penalties that keep a small model out of loops; the same seed gives the same reply.</source>
        <translation>确定性：总是选最可能的词元，每次回复都相同。均衡和创意会采样，并用惩罚项让小模型不陷入循环；相同的种子给出相同的回复。</translation>
    </message>
    <message>
        <source>whole context</source>
        <translation>整个上下文</translation>
    </message>
    <message>
        <source>0: greedy (deterministic); higher: more varied replies</source>
        <translation>0：贪心（确定性）；越高：回复越多样</translation>
    </message>
    <message>
        <source>Keep the k likeliest tokens (0: off)</source>
        <translation>只保留最可能的 k 个词元（0：关闭）</translation>
    </message>
    <message>
        <source>off</source>
        <translation>关闭</translation>
    </message>
    <message>
        <source>Keep the likeliest tokens up to this share of probability (1: off)</source>
        <translation>保留最可能的词元，直到累计概率达到此比例（1：关闭）</translation>
    </message>
    <message>
        <source>Drop tokens less likely than this share of the likeliest one (0: off)</source>
        <translation>舍弃概率低于最可能词元此比例的词元（0：关闭）</translation>
    </message>
    <message>
        <source>Make tokens already in the window less likely (1: off)</source>
        <translation>降低窗口内已出现词元的概率（1：关闭）</translation>
    </message>
    <message>
        <source>The repeat penalty&apos;s window, in tokens</source>
        <translation>重复惩罚的窗口，以词元计</translation>
    </message>
    <message>
        <source>DRY: penalize continuing a sequence that already occurred (0: off)</source>
        <translation>DRY：惩罚延续已出现过的序列（0：关闭）</translation>
    </message>
    <message>
        <source>DRY: how fast the penalty grows with the length of the repeat</source>
        <translation>DRY：惩罚随重复长度增长的速度</translation>
    </message>
    <message>
        <source>DRY: repeats this long go unpenalized</source>
        <translation>DRY：不超过此长度的重复不受惩罚</translation>
    </message>
    <message>
        <source>DRY: its window, in tokens</source>
        <translation>DRY：其窗口，以词元计</translation>
    </message>
    <message>
        <source>The same seed and settings give the same sampled reply</source>
        <translation>相同的种子和设置给出相同的采样回复</translation>
    </message>
    <message>
        <source>Stop a reply that loops</source>
        <translation>停止陷入循环的回复</translation>
    </message>
    <message>
        <source>End a reply that repeats the same span over and over (finish reason: repetition)</source>
        <translation>结束反复重复同一段内容的回复（结束原因：repetition）</translation>
    </message>
    <message>
        <source>Temperature</source>
        <translation>温度</translation>
    </message>
    <message>
        <source>Top-k</source>
        <translation>Top-k 截断</translation>
    </message>
    <message>
        <source>Top-p</source>
        <translation>Top-p 截断</translation>
    </message>
    <message>
        <source>Min-p</source>
        <translation>Min-p 截断</translation>
    </message>
    <message>
        <source>Repeat penalty</source>
        <translation>重复惩罚</translation>
    </message>
    <message>
        <source>Repeat window</source>
        <translation>重复窗口</translation>
    </message>
    <message>
        <source>DRY multiplier</source>
        <translation>DRY 系数</translation>
    </message>
    <message>
        <source>DRY base</source>
        <translation>DRY 底数</translation>
    </message>
    <message>
        <source>DRY allowed length</source>
        <translation>DRY 允许长度</translation>
    </message>
    <message>
        <source>DRY window</source>
        <translation>DRY 窗口</translation>
    </message>
    <message>
        <source>Details</source>
        <translation>详细设置</translation>
    </message>
    <message>
        <source>Preset</source>
        <translation>预设</translation>
    </message>
    <message>
        <source>Seed</source>
        <translation>种子</translation>
    </message>
</context>
<context>
    <name>SecondLaunch</name>
    <message>
        <source>--n-ctx {0:,} is not a context size ContextLens loads ({1:,} to {2:,}).</source>
        <translation>--n-ctx {0:,} 不是 ContextLens 能加载的上下文大小（{1:,} 到 {2:,}）。</translation>
    </message>
    <message>
        <source>The running ContextLens window is busy with a run, so it cannot load the model again at --n-ctx {0:,}: cancel the run first, or start another window with --new-instance.</source>
        <translation>正在运行的 ContextLens 窗口正忙于一次运行，无法以 --n-ctx {0:,} 重新加载模型：请先取消运行，或用 --new-instance 另开一个窗口。</translation>
    </message>
    <message>
        <source>The running ContextLens window works with a server, whose context size the server sets: --n-ctx cannot change it.</source>
        <translation>正在运行的 ContextLens 窗口使用的是服务器，其上下文大小由服务器决定：--n-ctx 无法更改。</translation>
    </message>
    <message>
        <source>--{0} {1} is not one of this window&apos;s choices: {2}.</source>
        <translation>--{0} {1} 不是此窗口的可选项之一：{2}。</translation>
    </message>
</context>
<context>
    <name>ServerAddresses</name>
    <message>
        <source>Add a server</source>
        <translation>添加服务器</translation>
    </message>
    <message>
        <source>Another server with the same model and context size: each job runs on the first that answers, and again from its start on the next when that one stops answering</source>
        <translation>另一台模型和上下文大小相同的服务器：每个任务在第一台应答的服务器上运行，若该服务器停止应答，则在下一台上从头重新运行</translation>
    </message>
    <message>
        <source>another server&apos;s address</source>
        <translation>另一台服务器的地址</translation>
    </message>
    <message>
        <source>Address {0}</source>
        <translation>地址 {0}</translation>
    </message>
    <message>
        <source>Remove</source>
        <translation>移除</translation>
    </message>
    <message>
        <source>Remove this server from the pool</source>
        <translation>从池中移除此服务器</translation>
    </message>
</context>
<context>
    <name>ServerBox</name>
    <message>
        <source>Server</source>
        <translation>服务器</translation>
    </message>
    <message>
        <source>http://127.0.0.1:8080</source>
        <translation>http://127.0.0.1:8080</translation>
    </message>
    <message>
        <source>An OpenAI-compatible server: llama-server, python -m llama_cpp.server or vLLM</source>
        <translation>兼容 OpenAI 的服务器：llama-server、python -m llama_cpp.server 或 vLLM</translation>
    </message>
    <message>
        <source>Keep the key in the system keyring</source>
        <translation>将密钥保存在系统密钥环中</translation>
    </message>
    <message>
        <source>the first the server lists</source>
        <translation>服务器列出的第一个</translation>
    </message>
    <message>
        <source>the server&apos;s</source>
        <translation>服务器的设置</translation>
    </message>
    <message>
        <source>Needed only when the server does not report its context size (llama-cpp-python&apos;s server does not)</source>
        <translation>仅当服务器不报告其上下文大小时需要（llama-cpp-python 的服务器不报告）</translation>
    </message>
    <message>
        <source>Count with the selected GGUF (the same model)</source>
        <translation>用所选 GGUF（同一模型）计数</translation>
    </message>
    <message>
        <source>Exact counts here and the model&apos;s own chat template; checked against the server&apos;s tokenizer</source>
        <translation>在本地精确计数并使用模型自己的聊天模板；已与服务器的分词器核对</translation>
    </message>
    <message>
        <source>Use the smallest context of the servers</source>
        <translation>使用各服务器中最小的上下文</translation>
    </message>
    <message>
        <source>Servers that report different context sizes are refused unless every job is planned for the smallest of them</source>
        <translation>报告不同上下文大小的服务器会被拒绝，除非每个任务都按其中最小的上下文规划</translation>
    </message>
    <message>
        <source>Connect</source>
        <translation>连接</translation>
    </message>
    <message>
        <source>Disconnect</source>
        <translation>断开</translation>
    </message>
    <message>
        <source>Add&amp;ress:</source>
        <translation>地址(&amp;R)：</translation>
    </message>
    <message>
        <source>API key:</source>
        <translation>API 密钥：</translation>
    </message>
    <message>
        <source>Model:</source>
        <translation>模型：</translation>
    </message>
    <message>
        <source>Context size:</source>
        <translation>上下文大小：</translation>
    </message>
    <message>
        <source>kept in the system keyring</source>
        <translation>已保存在系统密钥环中</translation>
    </message>
    <message>
        <source>none</source>
        <translation>无</translation>
    </message>
    <message>
        <source>{0} is listed twice</source>
        <translation>{0} 被列出了两次</translation>
    </message>
    <message>
        <source>not reported by this server</source>
        <translation>此服务器不报告</translation>
    </message>
    <message>
        <source>A pool of {0} servers; jobs run on the first that answers, and the gauges show each</source>
        <translation>由 {0} 台服务器组成的池；任务在第一台应答的服务器上运行，仪表显示每一台的状态</translation>
    </message>
    <message>
        <source>{0} at {1}, model {2}</source>
        <translation>{0}，地址 {1}，模型 {2}</translation>
    </message>
    <message>
        <source>Context: {0:,} tokens ({1})</source>
        <translation>上下文：{0:,} 个 token（{1}）</translation>
    </message>
    <message>
        <source>Token counts: {0}</source>
        <translation>token 计数：{0}</translation>
    </message>
    <message>
        <source> (estimates)</source>
        <translation> （估计值）</translation>
    </message>
    <message>
        <source>KV figures: {0}</source>
        <translation>KV 数据：{0}</translation>
    </message>
    <message>
        <source>from {0}</source>
        <translation>来自 {0}</translation>
    </message>
    <message>
        <source>Parallel slots: {0}</source>
        <translation>并行槽位：{0}</translation>
    </message>
    <message>
        <source>Not over HTTP: saving KV states (instant rollback), shifting the cache, the faithfulness audit</source>
        <translation>无法通过 HTTP 进行：保存 KV 状态（即时回滚）、移动缓存、忠实度审计</translation>
    </message>
</context>
<context>
    <name>ServerRows</name>
    <message>
        <source>Server {0} answers again</source>
        <translation>服务器 {0} 重新应答</translation>
    </message>
    <message>
        <source>Server {0} stopped answering: the job runs again from its start on {1}</source>
        <translation>服务器 {0} 停止应答：任务在 {1} 上从头重新运行</translation>
    </message>
    <message>
        <source>Server {0} does not answer; it is probed again now and then</source>
        <translation>服务器 {0} 没有应答；会不时再次探测</translation>
    </message>
    <message>
        <source>up</source>
        <translation>在线</translation>
    </message>
    <message>
        <source>{0} request(s) at once</source>
        <translation>同时 {0} 个请求</translation>
    </message>
    <message>
        <source>lost</source>
        <translation>失联</translation>
    </message>
    <message>
        <source>Probed again with a growing pause; used again when it answers and still serves the same model</source>
        <translation>以逐渐加长的间隔再次探测；当它应答且仍提供同一模型时重新使用</translation>
    </message>
    <message>
        <source>its job runs again on {0}</source>
        <translation>其任务在 {0} 上重新运行</translation>
    </message>
    <message>
        <source>its job ran again on {0}</source>
        <translation>其任务已在 {0} 上重新运行</translation>
    </message>
    <message>
        <source>running the job, moved from {0}</source>
        <translation>正在运行任务，从 {0} 移来</translation>
    </message>
    <message>
        <source>running the job</source>
        <translation>正在运行任务</translation>
    </message>
    <message>
        <source>idle</source>
        <translation>空闲</translation>
    </message>
</context>
<context>
    <name>SessionArchive</name>
    <message>
        <source>ContextLens</source>
        <translation>ContextLens</translation>
    </message>
    <message>
        <source>Cancel</source>
        <translation>取消</translation>
    </message>
    <message>
        <source>Export Session</source>
        <translation>导出会话</translation>
    </message>
    <message>
        <source>ContextLens sessions (*.ctxlens)</source>
        <translation>ContextLens 会话 (*.ctxlens)</translation>
    </message>
    <message>
        <source>Exporting the session to {0}…</source>
        <translation>正在将会话导出到 {0}…</translation>
    </message>
    <message>
        <source>Export to {0} cancelled; no file was written and nothing changed.</source>
        <translation>导出到 {0} 已取消；未写入任何文件，也没有任何改动。</translation>
    </message>
    <message>
        <source>Exported {0} versions, {1} runs and {2} KV states to {3} ({4}).</source>
        <translation>已将 {0} 个版本、{1} 次运行和 {2} 个 KV 状态导出到 {3}（{4}）。</translation>
    </message>
    <message>
        <source>Import Session</source>
        <translation>导入会话</translation>
    </message>
    <message>
        <source>ContextLens sessions (*.ctxlens);;All files (*)</source>
        <translation>ContextLens 会话 (*.ctxlens);;所有文件 (*)</translation>
    </message>
    <message>
        <source>This history is read-only: {0} cannot be imported.</source>
        <translation>此历史记录为只读：无法导入 {0}。</translation>
    </message>
    <message>
        <source>An export or import is running: open {0} again when it has finished.</source>
        <translation>正在导出或导入：完成后请再次打开 {0}。</translation>
    </message>
    <message>
        <source>Importing {0}…</source>
        <translation>正在导入 {0}…</translation>
    </message>
    <message>
        <source>Import of {0} cancelled; nothing changed in the history.</source>
        <translation>导入 {0} 已取消；历史记录没有任何改动。</translation>
    </message>
    <message>
        <source>Imported {0} as session #{1}: {2} versions, {3} runs, {4} KV states.</source>
        <translation>已将 {0} 导入为会话 #{1}：{2} 个版本、{3} 次运行、{4} 个 KV 状态。</translation>
    </message>
    <message>
        <source>Cancelling…</source>
        <translation>正在取消…</translation>
    </message>
</context>
<context>
    <name>SessionChooser</name>
    <message>
        <source>Session:</source>
        <translation>会话：</translation>
    </message>
    <message>
        <source>Refresh</source>
        <translation>刷新</translation>
    </message>
    <message>
        <source>All sessions</source>
        <translation>所有会话</translation>
    </message>
    <message>
        <source>{0} (#{1}, {2})</source>
        <translation>{0}（#{1}，{2}）</translation>
    </message>
</context>
<context>
    <name>SessionGuard</name>
    <message>
        <source>The model {0} is no longer there.</source>
        <translation>模型 {0} 已不存在。</translation>
    </message>
    <message>
        <source>The document {0} is no longer there.</source>
        <translation>文档 {0} 已不存在。</translation>
    </message>
    <message>
        <source>ContextLens did not close properly last time. Open what you were working on again?</source>
        <translation>ContextLens 上次未正常关闭。要重新打开您当时正在处理的内容吗？</translation>
    </message>
    <message>
        <source>Document: {0}</source>
        <translation>文档：{0}</translation>
    </message>
    <message>
        <source>Model: {0}</source>
        <translation>模型：{0}</translation>
    </message>
    <message>
        <source>Server: {0}</source>
        <translation>服务器：{0}</translation>
    </message>
    <message>
        <source>&amp;Restore</source>
        <translation>恢复(&amp;R)</translation>
    </message>
    <message>
        <source>Start &amp;Fresh</source>
        <translation>重新开始(&amp;F)</translation>
    </message>
</context>
<context>
    <name>SessionModel</name>
    <message>
        <source>Opening {0}…</source>
        <translation>正在打开 {0}…</translation>
    </message>
    <message>
        <source>Planning {0}…</source>
        <translation>正在规划 {0}…</translation>
    </message>
    <message>
        <source>Counting tokens…</source>
        <translation>正在统计 token…</translation>
    </message>
    <message>
        <source>Loading {0}…</source>
        <translation>正在加载 {0}…</translation>
    </message>
    <message>
        <source>Connecting to {0}…</source>
        <translation>正在连接 {0}…</translation>
    </message>
    <message>
        <source>Connected to {0} ({1}), context {2:,} tokens</source>
        <translation>已连接到 {0}（{1}），上下文 {2:,} 个 token</translation>
    </message>
    <message>
        <source>Calibrating: {0}/{1} settings tried…</source>
        <translation>正在校准：已尝试 {0}/{1} 组设置…</translation>
    </message>
    <message>
        <source>Rolled back to a new version #{0}; its recorded reply is shown, and Run generates it again.</source>
        <translation>已回滚到新版本 #{0}；显示的是记录下的回复，点击运行会重新生成。</translation>
    </message>
    <message>
        <source>Model loaded in {0:.2f} s</source>
        <translation>模型已加载，用时 {0:.2f} 秒</translation>
    </message>
    <message>
        <source>Ready</source>
        <translation>就绪</translation>
    </message>
    <message>
        <source>Open a document first.</source>
        <translation>请先打开文档。</translation>
    </message>
    <message>
        <source>Load a model first.</source>
        <translation>请先加载模型。</translation>
    </message>
    <message>
        <source>Type the question (or the extract instruction) first.</source>
        <translation>请先输入问题（或提取指令）。</translation>
    </message>
    <message>
        <source>None of the needles occurs in the document.</source>
        <translation>文档中没有出现任何一根针。</translation>
    </message>
    <message>
        <source>Planning…</source>
        <translation>正在规划…</translation>
    </message>
    <message>
        <source>Cancelling…</source>
        <translation>正在取消…</translation>
    </message>
    <message>
        <source>Planning cancelled; the plan shown is the last one made.</source>
        <translation>规划已取消；所示计划为最近一次生成的计划。</translation>
    </message>
    <message>
        <source>Opening cancelled.</source>
        <translation>打开已取消。</translation>
    </message>
    <message>
        <source>Cancelling the calibration…</source>
        <translation>正在取消校准…</translation>
    </message>
    <message>
        <source>Running…</source>
        <translation>正在运行…</translation>
    </message>
    <message>
        <source>Refused: {0}</source>
        <translation>已拒绝：{0}</translation>
    </message>
    <message>
        <source>{0} re-prompts each window with the summary so far: {1}</source>
        <translation>{0} 对每个窗口重新提示，并附上目前的摘要：{1}</translation>
    </message>
    <message>
        <source>nothing</source>
        <translation>无</translation>
    </message>
    <message>
        <source>Done: {0} · {1:,} of {2:,} prompt tokens evaluated, {3:,} reused from the KV cache</source>
        <translation>完成：{0} · 评估了 {1:,} / {2:,} 个提示词 token，{3:,} 个取自 KV 缓存</translation>
    </message>
    <message>
        <source>Done: {0}</source>
        <translation>完成：{0}</translation>
    </message>
    <message>
        <source>The run was not recorded: {0}</source>
        <translation>本次运行未被记录：{0}</translation>
    </message>
    <message>
        <source>Resuming from the saved KV state…</source>
        <translation>正在从已保存的 KV 状态继续…</translation>
    </message>
    <message>
        <source>Engine restarted</source>
        <translation>引擎已重启</translation>
    </message>
    <message>
        <source>The engine stopped: {0}. Starting it again…</source>
        <translation>引擎已停止：{0}。正在重新启动…</translation>
    </message>
    <message>
        <source>Tuned settings are ready: see Speed in the model panel.</source>
        <translation>调优设置已就绪：请查看模型面板中的“速度”。</translation>
    </message>
</context>
<context>
    <name>SeveralQuestions</name>
    <message>
        <source>Several Questions</source>
        <translation>多个问题</translation>
    </message>
    <message>
        <source>One question per line. Under “retrieve” each question gets its own plan; each answer becomes its own version in the thread. Ctrl+Enter takes them.</source>
        <translation>每行一个问题。在“retrieve”策略下，每个问题有自己的计划；每个回答成为对话中的单独版本。按 Ctrl+Enter 确认。</translation>
    </message>
</context>
<context>
    <name>StartPage</name>
    <message>
        <source>Open a document to see what reaches the model</source>
        <translation>打开一个文档，看看哪些内容会送到模型</translation>
    </message>
    <message>
        <source>ContextLens shows which parts of a long document fit the model&apos;s context, how they sit in its KV cache, and where each part of the answer came from.</source>
        <translation>ContextLens 会显示长文档的哪些部分能放进模型的上下文、它们在 KV 缓存中如何排布，以及回答的每一部分来自哪里。</translation>
    </message>
    <message>
        <source>Open a Document…</source>
        <translation>打开文档…</translation>
    </message>
    <message>
        <source>Open the Sample</source>
        <translation>打开示例</translation>
    </message>
    <message>
        <source>Recent documents:</source>
        <translation>最近的文档：</translation>
    </message>
    <message>
        <source>Or drop a file on the window: a document opens, a .gguf model is chosen, a .ctxlens session is imported.</source>
        <translation>也可以把文件拖到窗口上：文档会被打开，.gguf 模型会被选中，.ctxlens 会话会被导入。</translation>
    </message>
</context>
<context>
    <name>StoredReply</name>
    <message>
        <source>v{0} of session #{1}: {2} · {3} · {4}</source>
        <translation>会话 #{1} 的 v{0}：{2} · {3} · {4}</translation>
    </message>
    <message>
        <source>not run</source>
        <translation>未运行</translation>
    </message>
</context>
<context>
    <name>Strategy</name>
    <message>
        <source>refuse</source>
        <translation>拒绝</translation>
    </message>
    <message>
        <source>head</source>
        <translation>开头</translation>
    </message>
    <message>
        <source>tail</source>
        <translation>结尾</translation>
    </message>
    <message>
        <source>middle</source>
        <translation>首尾</translation>
    </message>
    <message>
        <source>rolling</source>
        <translation>滚动</translation>
    </message>
    <message>
        <source>semantic</source>
        <translation>语义</translation>
    </message>
    <message>
        <source>entropy</source>
        <translation>信息熵</translation>
    </message>
    <message>
        <source>map-reduce</source>
        <translation>映射归约</translation>
    </message>
    <message>
        <source>retrieve</source>
        <translation>检索</translation>
    </message>
</context>
<context>
    <name>StrategyPane</name>
    <message>
        <source>waiting…</source>
        <translation>等待中…</translation>
    </message>
    <message>
        <source>{0:,} of {1:,} tokens kept ({2:.0%}), {3} pass(es), boundaries {4:.0%}</source>
        <translation>保留 {0:,} / {1:,} 个 token（{2:.0%}），{3} 轮，边界完整度 {4:.0%}</translation>
    </message>
    <message>
        <source>, needles {0:.0%}</source>
        <translation>，针 {0:.0%}</translation>
    </message>
    <message>
        <source>Needles: the share of the facts typed in the Needles box whose text lies in the spans this plan keeps</source>
        <translation>针：在“针”输入框中输入的事实中，文本位于此计划保留片段内的比例</translation>
    </message>
    <message>
        <source>{0:.1f} s, {1}</source>
        <translation>{0:.1f} 秒，{1}</translation>
    </message>
</context>
<context>
    <name>Task</name>
    <message>
        <source>summarize</source>
        <translation>总结</translation>
    </message>
    <message>
        <source>ask</source>
        <translation>提问</translation>
    </message>
    <message>
        <source>extract</source>
        <translation>提取</translation>
    </message>
</context>
<context>
    <name>ThreadView</name>
    <message>
        <source>Click a question to open its version</source>
        <translation>点击问题可打开其版本</translation>
    </message>
    <message>
        <source>1 question</source>
        <translation>1 个问题</translation>
    </message>
    <message>
        <source>{0} questions</source>
        <translation>{0} 个问题</translation>
    </message>
    <message>
        <source>Thread: {0}</source>
        <translation>对话：{0}</translation>
    </message>
    <message>
        <source>v{0} · {1}</source>
        <translation>v{0} · {1}</translation>
    </message>
</context>
<context>
    <name>TunedSettingsBox</name>
    <message>
        <source>Threads</source>
        <translation>线程数</translation>
    </message>
    <message>
        <source>Batch</source>
        <translation>批大小</translation>
    </message>
    <message>
        <source>Micro-batch</source>
        <translation>微批大小</translation>
    </message>
    <message>
        <source>Flash</source>
        <translation>Flash Attention</translation>
    </message>
    <message>
        <source>Prompt tok/s</source>
        <translation>提示词 token/秒</translation>
    </message>
    <message>
        <source>Gen tok/s</source>
        <translation>生成 token/秒</translation>
    </message>
    <message>
        <source>{0} thread</source>
        <translation>{0} 个线程</translation>
    </message>
    <message>
        <source>{0} threads</source>
        <translation>{0} 个线程</translation>
    </message>
    <message>
        <source>{0}, batch {1}, flash on</source>
        <translation>{0}，批大小 {1}，Flash Attention 开</translation>
    </message>
    <message>
        <source>{0}, batch {1}, flash off</source>
        <translation>{0}，批大小 {1}，Flash Attention 关</translation>
    </message>
    <message>
        <source>{0:,.0f} prompt / {1:,.0f} gen tok/s</source>
        <translation>提示词 {0:,.0f} / 生成 {1:,.0f} token/秒</translation>
    </message>
    <message>
        <source>Speed</source>
        <translation>速度</translation>
    </message>
    <message>
        <source>Use tuned settings</source>
        <translation>使用调优设置</translation>
    </message>
    <message>
        <source>On: threads, batch sizes and flash attention are the fastest measured on this machine (measured on a model&apos;s first load). Off: the values above are used.</source>
        <translation>开启：线程数、批大小和 Flash Attention 使用在本机测得的最快值（在模型首次加载时测量）。关闭：使用上方的值。</translation>
    </message>
    <message>
        <source>Calibrate again</source>
        <translation>重新校准</translation>
    </message>
    <message>
        <source>Measure the candidates again and load the fastest</source>
        <translation>重新测量各候选设置并以最快的设置加载</translation>
    </message>
    <message>
        <source>Measurements</source>
        <translation>测量结果</translation>
    </message>
    <message>
        <source>Show every setting tried and its speed</source>
        <translation>显示尝试过的每组设置及其速度</translation>
    </message>
    <message>
        <source>Cancel</source>
        <translation>取消</translation>
    </message>
    <message>
        <source>Stop calibrating and load with the values above</source>
        <translation>停止校准并使用上方的值加载</translation>
    </message>
    <message>
        <source>calibrating: {0}/{1} settings</source>
        <translation>正在校准：{0}/{1} 组设置</translation>
    </message>
    <message>
        <source>Tuned for this machine: {0} — {1}</source>
        <translation>已针对本机调优：{0} — {1}</translation>
    </message>
    <message>
        <source>Tuned settings off: the values above are used.</source>
        <translation>调优设置已关闭：使用上方的值。</translation>
    </message>
    <message>
        <source>(Tuned: {0}.)</source>
        <translation>（调优值：{0}。）</translation>
    </message>
    <message>
        <source>{0}. {1}</source>
        <translation>{0}。{1}</translation>
    </message>
    <message>
        <source>on</source>
        <translation>开</translation>
    </message>
    <message>
        <source>off</source>
        <translation>关</translation>
    </message>
    <message>
        <source>Use Them</source>
        <translation>使用</translation>
    </message>
    <message>
        <source>Load the model again with the tuned settings</source>
        <translation>用调优设置重新加载模型</translation>
    </message>
    <message>
        <source>Measuring the fastest settings in the background: {0}/{1} tried. The model is ready to use meanwhile.</source>
        <translation>正在后台测量最快的设置：已试 {0}/{1} 项。在此期间模型可以正常使用。</translation>
    </message>
    <message>
        <source>Tuned settings are ready: {0} — {1}. Use them? (Later loads do.)</source>
        <translation>调优设置已就绪：{0} — {1}。现在使用吗？（之后的加载会自动使用。）</translation>
    </message>
    <message>
        <source>Not calibrated yet: after the first load on this machine, the fastest threads, batch and flash attention are measured in the background.</source>
        <translation>尚未校准：在本机首次加载后，会在后台测出最快的线程数、批大小和 Flash Attention 设置。</translation>
    </message>
</context>
<context>
    <name>WindowFiles</name>
    <message>
        <source>Open Document</source>
        <translation>打开文档</translation>
    </message>
    <message>
        <source>{0} cannot be imported: {1}</source>
        <translation>无法导入 {0}：{1}</translation>
    </message>
</context>
<context>
    <name>WindowStatus</name>
    <message>
        <source>ContextLens</source>
        <translation>ContextLens</translation>
    </message>
</context>
<context>
    <name>_FetchDialog</name>
    <message>
        <source>&amp;Download</source>
        <translation>下载(&amp;D)</translation>
    </message>
    <message>
        <source>Cancel</source>
        <translation>取消</translation>
    </message>
    <message>
        <source>Cancelling…</source>
        <translation>正在取消…</translation>
    </message>
    <message>
        <source>Checking the model…</source>
        <translation>正在检查模型…</translation>
    </message>
    <message>
        <source>{0:,.1f} of {1:,.1f} MB</source>
        <translation>{0:,.1f} / {1:,.1f} MB</translation>
    </message>
    <message>
        <source>Try &amp;Again</source>
        <translation>重试(&amp;A)</translation>
    </message>
    <message>
        <source>Close</source>
        <translation>关闭</translation>
    </message>
</context>
<context>
    <name>_Legend</name>
    <message>
        <source>pinned prefix</source>
        <translation>固定前缀</translation>
    </message>
    <message>
        <source>document chunks</source>
        <translation>文档分块</translation>
    </message>
    <message>
        <source>other context</source>
        <translation>其他上下文</translation>
    </message>
    <message>
        <source>question</source>
        <translation>问题</translation>
    </message>
    <message>
        <source>output</source>
        <translation>输出</translation>
    </message>
    <message>
        <source>notes</source>
        <translation>笔记</translation>
    </message>
    <message>
        <source>free</source>
        <translation>空闲</translation>
    </message>
</context>
<context>
    <name>main</name>
    <message>
        <source>Another ContextLens window does not answer; this one runs on its own.</source>
        <translation>另一个 ContextLens 窗口没有响应；此窗口将独立运行。</translation>
    </message>
    <message>
        <source>Model not found: {0} — run `make` to fetch the default model</source>
        <translation>找不到模型：{0} — 运行 `make` 以获取默认模型</translation>
    </message>
    <message>
        <source>No model yet: Get the Default Model… in the model panel fetches it (about 98 MB).</source>
        <translation>还没有模型：模型面板中的“获取默认模型…”可以获取它（约 98 MB）。</translation>
    </message>
</context>
</TS>
