import type { Todo } from './workspace'
import './workspace.css'

const marks: Record<Todo['status'], { mark: string; label: string }> = {
  completed: { mark: '✓', label: 'done' },
  in_progress: { mark: '▸', label: 'in progress' },
  pending: { mark: '○', label: 'to do' },
}

// TodoList shows the session's todo list, kept live by todo_update events; nothing when empty.
export function TodoList(props: { todos: Todo[] }) {
  const { todos } = props
  if (todos.length === 0) return null
  const done = todos.filter((t) => t.status === 'completed').length
  return (
    <section className="todos" aria-label="Todo list" data-testid="todos">
      <details open>
        <summary>
          Todo list <span className="muted small">{`${done} of ${todos.length} done`}</span>
        </summary>
        <ol>
          {todos.map((t) => (
            <li key={t.id} className={'todo todo-' + t.status} data-status={t.status}>
              <span className="todo-mark" aria-hidden="true">
                {marks[t.status]?.mark ?? '○'}
              </span>
              <span className="todo-text">{t.content}</span>
              <span className="visually-hidden">{` (${marks[t.status]?.label ?? t.status})`}</span>
            </li>
          ))}
        </ol>
      </details>
    </section>
  )
}
